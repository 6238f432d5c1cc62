"""Content codings (`Content-Encoding`) of recorded response bodies, decoded chunk by chunk.

The recorder keeps a response's bytes as they came, so a hop that compresses a stream (gzip on
`text/event-stream`) leaves compressed chunks in the recording. The analysis of a recorded
exchange must read what the client read: the decoded bytes, each decoded chunk at the arrival
time of the compressed one it came out of (a compressor that holds events back shows as late
chunks, which is the point).

gzip, x-gzip and deflate (zlib or raw) use the standard library; br and zstd use the brotli and
zstandard packages when they are installed (mitmproxy depends on both), imported only when a
recording needs them. Several codings (`gzip, br`) are undone in reverse order. A coding that is
unknown, unavailable or broken stops the decoding there: what came out so far is kept and the
reason is returned, so the analysis sees a stream that ends early (an outcome, not a crash).
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Sequence

Chunks = list[tuple[float, bytes]]
_IDENTITY = frozenset({"", "identity"})


def codings(header: Any) -> list[str]:
    """The codings a Content-Encoding value names, in the order they were applied."""
    if not isinstance(header, str):
        return []
    return [c.strip().lower() for c in header.split(",") if c.strip().lower() not in _IDENTITY]


def decode_chunks(header: Any, chunks: Sequence[tuple[float, bytes]]) -> tuple[Chunks, str | None]:
    """`chunks` decoded (empty outputs dropped) and None, or what decoded and why it stopped."""
    out: Chunks = [(t, c) for t, c in chunks]
    for coding in reversed(codings(header)):
        step = _decoder(coding)
        if isinstance(step, str):
            return out, step
        decoded: Chunks = []
        try:
            for t, chunk in out:
                data = step(chunk)
                if data:
                    decoded.append((t, data))
            tail = step(None)
            if tail:
                decoded.append((out[-1][0] if out else 0.0, tail))
        except Exception as exc:  # corrupt data: keep what decoded, say why it stopped
            return decoded, f"cannot decode the {coding} body: {exc}"
        out = decoded
    return out, None


def decode_body(header: Any, body: bytes) -> tuple[bytes, str | None]:
    """A whole body decoded (see `decode_chunks`)."""
    chunks, error = decode_chunks(header, [(0.0, body)] if body else [])
    return b"".join(c for _, c in chunks), error


def _decoder(coding: str) -> Callable[[bytes | None], bytes] | str:
    """An incremental decoder (a chunk in, bytes out; None flushes), or why there is none."""
    if coding in ("gzip", "x-gzip"):
        return _zlib(zlib.MAX_WBITS | 16)
    if coding == "deflate":
        return _deflate()
    if coding == "br":
        try:
            import brotli  # type: ignore[import-not-found]
        except ImportError:
            return "a br (brotli) body, and the brotli package is not installed"
        d = brotli.Decompressor()
        return lambda chunk: d.process(chunk) if chunk else b""
    if coding == "zstd":
        try:
            import zstandard  # type: ignore[import-not-found]
        except ImportError:
            return "a zstd body, and the zstandard package is not installed"
        z = zstandard.ZstdDecompressor().decompressobj()
        return lambda chunk: z.decompress(chunk) if chunk else b""
    return f"an unknown content coding {coding!r}"


def _zlib(wbits: int) -> Callable[[bytes | None], bytes]:
    d = zlib.decompressobj(wbits)
    return lambda chunk: d.decompress(chunk) if chunk is not None else _finish(d)


def _finish(d: Any) -> bytes:
    """The end of a zlib stream: what is left, or ValueError when the body stopped short of its
    end or carries bytes after it (corruption shows as one or the other)."""
    tail = d.flush()
    if d.unused_data:
        raise ValueError(f"{len(d.unused_data)} byte(s) after the end of the compressed data")
    if not d.eof:
        raise ValueError("the compressed data ends before its end marker")
    return tail


def _deflate() -> Callable[[bytes | None], bytes]:
    """`deflate` is zlib-wrapped by the standard, raw in the wild: decided on the first bytes."""
    state: dict[str, Any] = {}

    def step(chunk: bytes | None) -> bytes:
        if "d" not in state:
            if not chunk:
                return b""
            zlib_wrapped = len(chunk) >= 2 and (chunk[0] & 0x0F) == 8 and (chunk[0] << 8 | chunk[1]) % 31 == 0
            state["d"] = zlib.decompressobj(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
        d = state["d"]
        return d.decompress(chunk) if chunk is not None else _finish(d)

    return step
