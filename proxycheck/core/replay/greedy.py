"""Greedy decoding for replays (`--greedy`): the sampling parameters of a request body rewritten
so that the engine answers it the same way every time.

Harnesses ask for temperature > 0 (or leave the engine's default, 1), so a real engine answers
two replays of one request differently, and content can then be judged only by rates
(`proxycheck.core.diagnose.differ`). With greedy parameters written into every replayed body, on every
route alike, vLLM and SGLang answer each request the same way (up to their batching), and
content is compared exchange by exchange again. Per dialect (the request's own names):

| dialect | what is set |
|---|---|
| `openai_chat`, `openai_completions` | `temperature` 0, `seed` 0; `top_p` 1 when present; `top_k` dropped (vLLM's and SGLang's extension) |
| `openai_responses` | `temperature` 0; `top_p` 1 when present (the API has no seed) |
| `anthropic_messages` | `temperature` 0; `top_p` and `top_k` dropped (the API has no seed, and newer models refuse `temperature` with `top_p`) |
| `sglang_generate` | in `sampling_params` (each, for a batch): `temperature` 0, `top_p` 1 when present, `top_k` dropped |

SGLang samples greedily at temperature 0 whatever the seed, and its seed member
(`sampling_seed`) is not in every version (older ones refuse members they do not know), so none
is added there. At temperature 0 `top_p` and `top_k` change nothing on these engines; they are
set out of the way for engines that would apply them anyway.

A body that is not a JSON object, or of no known dialect, is sent as it is; so is one already
greedy (the same bytes). A rewritten body is JSON written again with the same content: compact
or spaced and with raw UTF-8 or `\\u` escapes as the recorded body was, so its size stays close
to the recorded one's (a hop's body size limit sees about what it saw).

`greedy_sessions` rewrites a replay plan's bodies once, before a replay starts (so no request
waits on the rewrite, and chained mode builds on greedy bodies); the replayer applies it when
its options say `greedy`.

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Callable, Sequence

from proxycheck.core.replay.plan import PlannedSession

GREEDY_SEED = 0


def greedy_sessions(sessions: Sequence[PlannedSession]) -> list[PlannedSession]:
    """The sessions with every turn's body rewritten by `greedy_body` (by the turn's dialect)."""
    return [
        replace(s, turns=tuple(replace(t, body=greedy_body(t.dialect, t.body)) for t in s.turns)) for s in sessions
    ]


def greedy_body(dialect: str | None, body: bytes) -> bytes:
    """`body` with greedy sampling parameters for `dialect` (see the module docstring)."""
    rewrite = _REWRITES.get(dialect or "")
    if rewrite is None:
        return body
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return body
    if not isinstance(doc, dict):
        return body
    greedy = rewrite(doc)
    if greedy == doc:
        return body
    return _dumps(greedy, like=body)


def _openai(doc: dict[str, Any]) -> dict[str, Any]:
    out = _set(doc, temperature=0, seed=GREEDY_SEED)
    return _top(out, drop_top_p=False)


def _responses(doc: dict[str, Any]) -> dict[str, Any]:
    return _top(_set(doc, temperature=0), drop_top_p=False, drop_top_k=False)


def _anthropic(doc: dict[str, Any]) -> dict[str, Any]:
    return _top(_set(doc, temperature=0), drop_top_p=True)


def _sglang(doc: dict[str, Any]) -> dict[str, Any]:
    params = doc.get("sampling_params")
    if isinstance(params, list):  # a batch: one set of parameters per prompt
        greedy: Any = [_top(_set(p, temperature=0), drop_top_p=False) if isinstance(p, dict) else p for p in params]
    elif isinstance(params, dict):
        greedy = _top(_set(params, temperature=0), drop_top_p=False)
    else:
        greedy = {"temperature": 0}  # absent (or null): SGLang's default temperature is 1
    return {**doc, "sampling_params": greedy}


def _set(doc: dict[str, Any], **values: Any) -> dict[str, Any]:
    return {**doc, **values}


def _top(doc: dict[str, Any], *, drop_top_p: bool, drop_top_k: bool = True) -> dict[str, Any]:
    out = dict(doc)
    if "top_p" in out:
        if drop_top_p:
            del out["top_p"]
        else:
            out["top_p"] = 1
    if drop_top_k:
        out.pop("top_k", None)
    return out


_REWRITES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "openai_chat": _openai,
    "openai_completions": _openai,
    "openai_responses": _responses,
    "anthropic_messages": _anthropic,
    "sglang_generate": _sglang,
}


# The first member of a JSON object, up to the space after its colon (if any): how the body was
# written, by its first key (strings inside it may hold any text, `": ` among it).
_FIRST_MEMBER = re.compile(rb'\A\s*\{\s*"(?:[^"\\]|\\.)*"\s*:( ?)')


def _dumps(doc: dict[str, Any], *, like: bytes) -> bytes:
    """JSON as close in form to `like` as the content allows: its spacing (as after its first
    key), and raw UTF-8 when it had any (else `\\u` escapes, as `json.dumps` writes by default)."""
    first = _FIRST_MEMBER.match(like[:4096])
    spaced = bool(first and first.group(1))
    separators = (", ", ": ") if spaced else (",", ":")
    if not like.isascii():
        try:
            return json.dumps(doc, ensure_ascii=False, separators=separators).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (a "\ud800" escape) has no UTF-8 form
            pass
    return json.dumps(doc, separators=separators).encode("ascii")
