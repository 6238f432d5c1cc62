"""Content codings of recorded bodies (proxycheck.core.protocol.encoding): compressed chunks in, the
bytes the client read out, each at the arrival time of the chunk it came from."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.protocol.encoding import codings, decode_body, decode_chunks

SSE = b"".join(b'data: {"choices":[{"index":0,"delta":{"content":"tok%d "}}]}\n\n' % i for i in range(50))
SSE += b"data: [DONE]\n\n"


def split(data: bytes, cuts: list[int]) -> list[tuple[float, bytes]]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [(i * 0.1, data[a:b]) for i, (a, b) in enumerate(zip(points, points[1:])) if b > a]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4000), max_size=12))
def test_gzip_split_anywhere_decodes_to_the_stream(cuts: list[int]) -> None:
    chunks = split(gzip.compress(SSE), cuts)
    decoded, error = decode_chunks("gzip", chunks)
    assert error is None
    assert b"".join(c for _, c in decoded) == SSE
    # Every decoded chunk carries the arrival time of a compressed one, in order.
    times = [t for t, _ in decoded]
    assert times == sorted(times) and set(times) <= {t for t, _ in chunks}


def test_a_compressor_flushing_per_event_keeps_the_timing() -> None:
    # What a streaming hop does (nginx gzip with buffering off): a sync flush after each event.
    comp = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)
    events = SSE.split(b"\n\n")[:-1]
    chunks = [(i * 0.02, comp.compress(e + b"\n\n") + comp.flush(zlib.Z_SYNC_FLUSH)) for i, e in enumerate(events)]
    chunks.append((len(events) * 0.02, comp.flush()))
    decoded, error = decode_chunks("gzip", chunks)
    assert error is None and len(decoded) == len(events)
    assert [t for t, _ in decoded] == [t for t, _ in chunks[:-1]]


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS])
def test_deflate_wrapped_or_raw(wbits: int) -> None:
    comp = zlib.compressobj(wbits=wbits)
    body = comp.compress(SSE) + comp.flush()
    assert decode_body("deflate", body) == (SSE, None)


def test_stacked_codings_are_undone_in_reverse() -> None:
    body = zlib.compress(gzip.compress(SSE))  # gzip first, then deflate
    assert codings("gzip, deflate") == ["gzip", "deflate"]
    assert decode_body("gzip, deflate", body) == (SSE, None)


def test_br_and_zstd_when_their_packages_are_there() -> None:
    brotli = pytest.importorskip("brotli")
    zstandard = pytest.importorskip("zstandard")
    assert decode_body("br", brotli.compress(SSE)) == (SSE, None)
    assert decode_body("zstd", zstandard.ZstdCompressor().compress(SSE)) == (SSE, None)


def test_identity_and_no_header_pass_through() -> None:
    chunks = split(SSE, [100, 2000])
    for header in (None, "", "identity", 7):
        assert decode_chunks(header, chunks) == (chunks, None)


def test_corrupt_or_unknown_codings_stop_with_a_reason() -> None:
    good = gzip.compress(SSE)
    broken = good[:200] + bytes(b ^ 0xFF for b in good[200:260]) + good[260:]
    decoded, error = decode_chunks("gzip", split(broken, [100, 200, 300]))
    # Corrupt deflate data may decode to garbage before the check fails: the reason is what counts.
    assert error is not None and error.startswith("cannot decode the gzip body")
    cut, error = decode_chunks("gzip", split(good[:150], [50, 100]))  # a body that stops short
    assert error == "cannot decode the gzip body: the compressed data ends before its end marker"
    assert SSE.startswith(b"".join(c for _, c in cut))
    assert decode_body("compress", b"xyz") == (b"xyz", "an unknown content coding 'compress'")
