"""What a replay of a WebSocket session sends (proxycheck.core.replay.socket): each turn's message
naming the live responses, byte for byte elsewhere; the handshake's headers; the socket's URL."""

from __future__ import annotations

import json

from proxycheck.core.replay.socket import SocketIds, handshake_headers, upgrade_url, ws_url


def test_a_later_turn_names_the_live_response_and_keeps_every_other_byte() -> None:
    ids = SocketIds()
    recorded = b'{"type": "response.create",  "previous_response_id": "resp_rec1", "input": []}'
    assert ids.message(recorded) == recorded  # nothing live yet: as recorded
    ids.record("resp_rec1", "resp_live9")
    sent = ids.message(recorded)
    assert sent == recorded.replace(b"resp_rec1", b"resp_live9")  # the spacing kept
    assert json.loads(sent)["previous_response_id"] == "resp_live9"
    # A turn that names no response, or one never answered live, or not JSON: as recorded.
    for body in (b'{"type": "response.create"}', b'{"previous_response_id": "resp_other"}', b"not json", b"[1]"):
        assert ids.message(body) == body
    ids.record(None, "resp_x")
    ids.record("resp_y", None)  # a turn with no id on either side pairs nothing
    assert ids.message(b'{"previous_response_id": "resp_y"}') == b'{"previous_response_id": "resp_y"}'


def test_the_handshake_keeps_the_recorded_headers_but_those_each_handshake_makes() -> None:
    recorded = [("Authorization", "Bearer x"), ("OpenAI-Beta", "responses_websockets=2026-02-06"),
                ("Sec-WebSocket-Key", "abc"), ("Sec-WebSocket-Version", "13"), ("Upgrade", "websocket"),
                ("Connection", "Upgrade"), ("Host", "old:1")]  # fmt: skip
    assert handshake_headers(recorded) == {"Authorization": "Bearer x", "OpenAI-Beta": "responses_websockets=2026-02-06"}
    assert ws_url("https://h/v1/responses") == "wss://h/v1/responses" and ws_url("http://h:1/x") == "ws://h:1/x"


def test_a_socket_is_opened_with_the_http_form_of_its_url() -> None:
    # What a forward proxy reads in the request line: an http URI (a `ws://` one is refused).
    assert upgrade_url("ws://h:1/v1/responses?a=ws://") == "http://h:1/v1/responses?a=ws://"
    assert upgrade_url("wss://h/v1/responses") == "https://h/v1/responses"
    assert upgrade_url(ws_url("http://h:1/x")) == "http://h:1/x" and upgrade_url("https://h/x") == "https://h/x"
