"""The recorder's pure rules (proxycheck.core.recording.capture): which responses get a tee, how bursts of
chunks are merged, connection reuse and idle time, and values made fit for a recording."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxycheck.core.recording.capture import ConnectionBook, coalesce, header_text, media_type, safe_mode, tee_response


def tee(content_type: str | None = None, *, length: int | None = None, chunked: bool = False,
        streamed: bool = False, limit: int | None = None) -> bool:
    return tee_response(content_type=content_type, content_length=length, chunked=chunked,
                        already_streamed=streamed, stream_large_bodies=limit)


class TestTeeResponse:
    @pytest.mark.parametrize("ctype", ["text/event-stream", "Text/Event-Stream; charset=utf-8", " text/event-stream "])
    def test_sse_is_teed_whatever_its_framing(self, ctype: str) -> None:
        assert tee(ctype) and tee(ctype, length=120) and tee(ctype, chunked=True)

    @pytest.mark.parametrize("ctype", ["application/x-ndjson", "application/jsonl", "application/stream+json"])
    def test_ndjson_is_teed_when_its_length_is_open(self, ctype: str) -> None:
        assert tee(ctype, chunked=True)
        assert tee(ctype)  # close-delimited, or HTTP/2 without content-length
        assert not tee(ctype, length=500)  # a whole body: recorded as one

    @pytest.mark.parametrize("ctype", ["application/json", "text/plain", None, ""])
    def test_other_bodies_are_left_to_mitmproxy(self, ctype: str | None) -> None:
        assert not tee(ctype, length=10)
        assert not tee(ctype, chunked=True)

    def test_a_body_mitmproxy_streams_anyway_is_teed(self) -> None:
        assert tee("application/json", length=10, streamed=True)

    def test_stream_large_bodies_tees_what_may_grow_past_it(self) -> None:
        assert tee("application/json", length=2000, limit=1000)
        assert not tee("application/json", length=1000, limit=1000)
        assert tee("application/json", chunked=True, limit=1 << 20)  # unknown size: may grow past it
        assert not tee("application/json", chunked=True, limit=None)

    def test_media_type(self) -> None:
        assert media_type("Application/JSON; charset=utf-8") == "application/json"
        assert media_type(None) == ""


class TestCoalesce:
    def test_a_burst_becomes_one_chunk_stamped_when_its_last_piece_came(self) -> None:
        times = [1.0, 1.0002, 1.0009, 1.5, 2.0]
        chunks = [b"a", b"b", b"c", b"d", b"e"]
        assert coalesce(times, chunks, 0.001) == [(1.0009, b"abc"), (1.5, b"d"), (2.0, b"e")]

    def test_a_run_is_bounded_by_its_first_chunk_not_the_previous_one(self) -> None:
        # A steady trickle 0.6 ms apart must not merge into one chunk that hides its pace.
        times = [i * 0.0006 for i in range(10)]
        out = coalesce(times, [b"x"] * 10, 0.001)
        assert [len(c) for _, c in out] == [2, 2, 2, 2, 2]

    def test_zero_span_keeps_distinct_times_apart(self) -> None:
        assert coalesce([1.0, 1.0, 2.0], [b"a", b"b", b"c"], 0.0) == [(1.0, b"ab"), (2.0, b"c")]

    def test_empty_chunks_are_dropped(self) -> None:
        assert coalesce([1.0, 5.0], [b"", b"a"], 0.001) == [(5.0, b"a")]
        assert coalesce([], [], 0.001) == []

    @given(
        st.lists(st.tuples(st.floats(0, 0.01), st.binary(max_size=8)), max_size=40),
        st.sampled_from([0.0, 0.0005, 0.001, 0.005]),
    )
    def test_bytes_are_kept_and_times_never_precede_their_bytes(
        self, steps: list[tuple[float, bytes]], span: float
    ) -> None:
        times, t = [], 0.0
        for gap, _ in steps:
            t += gap
            times.append(t)
        chunks = [c for _, c in steps]
        out = coalesce(times, chunks, span)
        assert b"".join(c for _, c in out) == b"".join(chunks)
        assert all(c for _, c in out)
        assert [t for t, _ in out] == sorted(t for t, _ in out)
        # Each merged chunk is stamped with the arrival of its last byte.
        ends, pos = {}, 0
        for t, c in zip(times, chunks):
            pos += len(c)
            if c:
                ends[pos] = t
        pos = 0
        for t, c in out:
            pos += len(c)
            assert t == ends[pos]


class TestConnectionBook:
    def test_a_fresh_connection_is_not_reused_and_has_no_idle_time(self) -> None:
        book = ConnectionBook()
        assert book.begin("s1", 10.0) == (False, None)

    def test_the_next_exchange_reuses_it_after_the_idle_gap(self) -> None:
        book = ConnectionBook()
        book.begin("s1", 10.0)
        book.end("s1", 11.0)
        reused, idle = book.begin("s1", 14.5)
        assert reused and idle == pytest.approx(3.5)
        book.end("s1", 15.0)
        assert book.begin("s1", 15.25) == (True, pytest.approx(0.25))

    def test_a_multiplexed_connection_busy_with_another_exchange_was_not_idle(self) -> None:
        book = ConnectionBook()
        book.begin("h2", 1.0)
        assert book.begin("h2", 1.1) == (True, 0.0)
        book.end("h2", 2.0)
        assert book.begin("h2", 2.5) == (True, 0.0)  # the second one is still in progress
        book.end("h2", 3.0)
        book.end("h2", 3.0)
        assert book.begin("h2", 4.0) == (True, pytest.approx(1.0))

    def test_clock_disagreement_never_gives_a_negative_idle_time(self) -> None:
        book = ConnectionBook()
        book.begin("s1", 10.0)
        book.end("s1", 11.0)
        assert book.begin("s1", 10.9) == (True, 0.0)

    def test_connections_are_independent_and_forgotten_when_closed(self) -> None:
        book = ConnectionBook()
        book.begin("a", 1.0)
        book.end("a", 2.0)
        assert book.begin("b", 3.0) == (False, None)
        book.forget("a")
        book.end("a", 5.0)  # a late end for a closed connection is ignored
        assert book.get("a") is None and len(book) == 1
        assert book.begin("a", 6.0) == (False, None)


class TestValues:
    def test_valid_text_is_unchanged(self) -> None:
        assert header_text("Bearer abc – ü") == "Bearer abc – ü"

    def test_bytes_that_were_not_utf8_become_latin1_characters(self) -> None:
        raw = b"caf\xe9 \xff"
        assert header_text(raw.decode("utf-8", "surrogateescape")) == "café ÿ"

    def test_a_lone_surrogate_stays_visible(self) -> None:
        assert header_text("a\ud800b") == "a\\ud800b"

    @pytest.mark.parametrize(
        "spec,safe",
        [
            ("upstream:http://user:pw@proxy:3128@8080", "upstream:http://proxy:3128@8080"),
            ("reverse:https://tok@host/v1@127.0.0.1:8080", "reverse:https://host/v1@127.0.0.1:8080"),
            ("upstream:http://proxy:3128", "upstream:http://proxy:3128"),
            ("regular", "regular"),
            ("regular@8080", "regular@8080"),
            ("reverse:http://127.0.0.1:8000@8080", "reverse:http://127.0.0.1:8000@8080"),
        ],
    )
    def test_mode_specs_lose_their_credentials(self, spec: str, safe: str) -> None:
        assert safe_mode(spec) == safe
