"""Incremental, sans-IO Server-Sent Events parser (WHATWG event-stream interpretation).

This module owns the framing of an SSE response body: it turns the reassembled byte stream
into events and comments, with the byte offsets and arrival times the replayer and the
differ need. Like h11 it does no I/O and reads no clock: the caller feeds bytes together with
the time they arrived (`SSEParser.feed`) and says when the stream ended (`SSEParser.close`).
What the events *mean* (OpenAI chunks, Anthropic messages, ...) belongs to the dialects.

The rules are https://html.spec.whatwg.org/multipage/server-sent-events.html
#event-stream-interpretation, with two additions a recorder needs and a browser does not:

* comments (`: ping`) are reported as `SSEComment`, so keep-alives can be seen and timed;
* at end of stream an unterminated last event is reported with `complete=False` instead of
  being dropped silently, so a truncated stream can be told from a clean one.

Chunk boundaries never change the items (only their `time`): proxies re-chunk freely. One
consequence: a line ending in a CR that is the last byte fed so far is held back until the
next byte (or `close`), because that byte may be the LF of a CRLF, which belongs to the same
line end and so to the item's `end` offset.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat

__all__ = ["SSEComment", "SSEEvent", "SSEItem", "SSEParser", "parse"]

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    `type` is the `event` field ("message" when the block set none); `data` its `data` lines
    joined with "\\n"; `id` the last-event-ID buffer at dispatch (it persists across events,
    None if never set); `retry` the valid `retry` value given in this block, else None.
    `start` is the offset of the block's first non-comment line, `end` the offset just past
    the blank line that dispatched it (the stream's end for an incomplete event). `time` is the
    arrival time of the chunk that completed it. `complete` is False only for an unterminated
    last event reported by `SSEParser.close`.
    """

    type: str
    data: str
    id: str | None
    retry: int | None
    start: int
    end: int
    time: float
    complete: bool = True


@dataclass(frozen=True, slots=True)
class SSEComment:
    """One comment line (`:` first), e.g. a keep-alive `: ping`.

    `text` is what follows the colon, one leading space removed; `start`/`end` are the offsets
    of the line including its terminator; `time` the arrival time of the chunk that completed it.
    """

    text: str
    start: int
    end: int
    time: float


SSEItem = SSEEvent | SSEComment


def _parse_retry(value: str, current: int | None) -> int | None:
    """The `retry` value if it is all ASCII digits (WHATWG), else `current` (ignored)."""
    if not (value.isascii() and value.isdigit()):
        return current
    try:
        return int(value)
    except ValueError:  # more digits than Python's int() accepts from a string: absurd, ignored
        return current


class SSEParser:
    """Turns a byte stream, fed in chunks of any size, into `SSEEvent` and `SSEComment` items.

    `feed(chunk, time)` returns the items the chunk completed; `close(time)` flushes the end of
    the stream. `offset` is the number of bytes fed; `pending` the bytes at the end that are
    not settled yet: the open event block (from its first line) or the unfinished line.
    Bytes before that are in returned items or were discarded (blank lines, BOM, empty blocks).
    """

    __slots__ = (
        "_offset",
        "_line_start",
        "_pieces",
        "_cr_tail",
        "_bom_head",
        "_closed",
        "_data",
        "_type",
        "_id",
        "_retry",
        "_block_start",
        "_in_block",
    )

    def __init__(self) -> None:
        self._offset = 0  # bytes fed so far
        self._line_start = 0  # offset of the first byte not yet split into lines
        # The unfinished line, as the chunks brought it: joined only once it completes, so a
        # long line arriving in tiny chunks costs linear time, not quadratic.
        self._pieces: list[bytes] = []
        self._cr_tail = False  # the unfinished line ends with a CR (see the module docstring)
        # The first bytes of the stream while they might still be a split BOM; None once known.
        self._bom_head: bytes | None = b""
        self._closed = False
        # WHATWG buffers of the open block. Data lines are kept as a list and joined at
        # dispatch, which is the spec's "append value + LF, drop the last LF".
        self._data: list[str] = []
        self._type = ""
        self._id: str | None = None  # last-event-ID buffer: survives dispatch
        self._retry: int | None = None
        self._block_start: int | None = None  # offset of the open block's first non-comment line
        self._in_block = False  # a data/event/id/retry line since the last blank line

    @property
    def offset(self) -> int:
        """Total bytes fed so far."""
        return self._offset

    @property
    def pending(self) -> int:
        """Bytes fed that are not yet settled: the open block, else the unfinished line."""
        start = self._block_start if self._block_start is not None else self._line_start
        return self._offset - start

    def feed(self, chunk: bytes, time: float) -> list[SSEItem]:
        """Add the next bytes of the stream, which arrived at `time`; return completed items."""
        if self._closed:
            raise ValueError("SSEParser.feed() called after close()")
        if not chunk:
            return []  # tells nothing, and must not resolve a held-back CR
        self._offset += len(chunk)
        if self._bom_head is not None:
            chunk = self._skip_bom(self._bom_head + chunk)
            if not chunk:
                return []
        out: list[SSEItem] = []
        pieces = self._pieces
        # Common case first: whole LF-terminated lines and no CR anywhere.
        if not pieces and chunk[-1] == 10 and b"\r" not in chunk:
            lines = chunk.split(b"\n")
            lines.pop()  # the empty string after the final LF
            self._take_lines(lines, repeat(1), time, out)
            return out
        self._feed_general(chunk, time, out)
        return out

    def close(self, time: float) -> list[SSEItem]:
        """End of stream at `time`: finish the last line and report an unterminated event."""
        if self._closed:
            return []
        self._closed = True
        out: list[SSEItem] = []
        if self._bom_head:  # the stream was shorter than a BOM: those bytes are text
            self._pieces.append(self._bom_head)
        self._bom_head = None
        tail = b"".join(self._pieces)
        self._pieces = []
        if self._cr_tail:  # nothing followed the final CR, so it ends its line by itself
            self._cr_tail = False
            self._take_region(tail, True, time, out)
        elif tail:
            if tail[0] != 0x3A:  # a partial field line leaves the block open, even if unknown
                self._in_block = True
            self._take_lines([tail], [0], time, out)
        if self._in_block:
            out.append(self._incomplete_event(time))
        self._reset_block()
        return out

    def _skip_bom(self, head: bytes) -> bytes:
        """Drop a UTF-8 BOM at the very start of the stream, also when it arrives split.

        `head` is all the stream so far; returns what of it is left to parse.
        """
        if len(head) < 3 and _BOM.startswith(head):
            self._bom_head = head  # cannot tell yet
            return b""
        self._bom_head = None
        if head.startswith(_BOM):
            self._line_start = 3  # the BOM counts in offsets, but starts no line
            return head[3:]
        return head

    def _feed_general(self, chunk: bytes, time: float, out: list[SSEItem]) -> None:
        """Feed a chunk that continues an unfinished line, ends mid-line, or holds a CR."""
        n = len(chunk)
        lf = chunk.rfind(b"\n")
        cr = chunk.rfind(b"\r")
        cr_tail = cr == n - 1
        if cr_tail:  # its line end is known only when the next byte comes
            cr = chunk.rfind(b"\r", 0, n - 1)
        cut = max(lf, cr) + 1  # chunk[:cut] holds only complete lines (with their ends)
        if cut == 0 and not self._cr_tail:
            self._pieces.append(chunk)
            self._cr_tail = cr_tail
            return
        # Complete lines now: the unfinished line (a held-back CR ends it too, since the byte
        # after it is not an LF: an LF would have made lf >= 0 and cut > 0) plus chunk[:cut].
        has_cr = self._cr_tail or cr >= 0
        pieces = self._pieces
        if pieces:
            pieces.append(chunk[:cut])
            region = b"".join(pieces)
        else:
            region = chunk[:cut] if cut < n else chunk
        rest = chunk[cut:]
        self._pieces = [rest] if rest else []
        self._cr_tail = cr_tail
        self._take_region(region, has_cr, time, out)

    def _take_region(self, region: bytes, has_cr: bool, time: float, out: list[SSEItem]) -> None:
        """Parse `region`, whole lines each ending with a known CR, LF or CRLF."""
        if has_cr and b"\r" in region:
            # Exact path: bytes.splitlines splits on exactly CR, LF and CRLF (unlike str's).
            parts = region.splitlines(keepends=True)
            lines = [part.rstrip(b"\r\n") for part in parts]
            self._take_lines(lines, map(int.__sub__, map(len, parts), map(len, lines)), time, out)
        else:
            lines = region.split(b"\n")
            lines.pop()
            self._take_lines(lines, repeat(1), time, out)

    def _take_lines(
        self, lines: list[bytes], term_lens: Iterable[int], time: float, out: list[SSEItem]
    ) -> None:
        """Interpret complete lines (without terminators) starting at `_line_start`.

        `term_lens` gives each line's terminator length (0 for the unterminated last line at
        close). The hot loop keeps the block state in locals and stores it back at the end.
        """
        pos = self._line_start
        data = self._data
        etype = self._type
        last_id = self._id
        retry = self._retry
        block_start = self._block_start
        in_block = self._in_block
        for raw, term in zip(lines, term_lens, strict=False):  # term_lens may be endless
            end = pos + len(raw) + term
            if not raw:  # blank line: dispatch
                if data:
                    out.append(
                        SSEEvent(
                            etype or "message",
                            data[0] if len(data) == 1 else "\n".join(data),
                            last_id,
                            retry,
                            block_start,  # type: ignore[arg-type]  # set by the data line
                            end,
                            time,
                        )
                    )
                    data.clear()
                etype = ""
                retry = None
                block_start = None
                in_block = False
            elif raw.startswith(b"data: "):  # by far the most common line: skip the general split
                data.append(raw[6:].decode("utf-8", "replace"))
                if block_start is None:
                    block_start = pos
                in_block = True
            else:
                line = raw.decode("utf-8", "replace")
                if line[0] == ":":
                    out.append(
                        SSEComment(line[2:] if line[1:2] == " " else line[1:], pos, end, time)
                    )
                else:
                    if block_start is None:
                        block_start = pos
                    # No colon: the whole line is the field name and the value is empty.
                    name, _, value = line.partition(":")
                    if value[:1] == " ":
                        value = value[1:]
                    if name == "data":
                        data.append(value)
                        in_block = True
                    elif name == "event":
                        etype = value
                        in_block = True
                    elif name == "id":
                        if "\0" not in value:
                            last_id = value
                        in_block = True
                    elif name == "retry":
                        # An invalid value is ignored: an earlier valid one in the block stays.
                        retry = _parse_retry(value, retry)
                        in_block = True
            pos = end
        self._line_start = pos
        self._type = etype
        self._id = last_id
        self._retry = retry
        self._block_start = block_start
        self._in_block = in_block

    def _incomplete_event(self, time: float) -> SSEEvent:
        """The open block at end of stream, as an event with complete=False."""
        return SSEEvent(
            self._type or "message",
            "\n".join(self._data),
            self._id,
            self._retry,
            self._block_start,  # type: ignore[arg-type]  # a field line set it
            self._offset,
            time,
            False,
        )

    def _reset_block(self) -> None:
        self._data = []
        self._type = ""
        self._retry = None
        self._block_start = None
        self._in_block = False


def parse(data: bytes, time: float = 0.0) -> list[SSEItem]:
    """All items of a complete stream: feed `data` at once, then close, both at `time`."""
    parser = SSEParser()
    items = parser.feed(data, time)
    items += parser.close(time)
    return items
