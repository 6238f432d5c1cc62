"""A recording on its way to a verdict: loaded once, analysed once, asked by every command.

`open_recording(DIR)` loads the directory (`proxycheck.io.storage.load`) and keeps what the
commands derive from it: the sessions as a user reads them (`summaries`) and the sessions as a
replay sends them (`planned`). Nothing here prints; the warnings are handed back for the command
to show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from proxycheck.core.errors import BadInput
from proxycheck.core.recording.sessions import DEFAULT_SESSION_FIELDS, DEFAULT_SESSION_HEADERS
from proxycheck.core.recording.summary import SessionSummary, summarize_sessions
from proxycheck.core.replay.plan import PlannedSession, plan_sessions
from proxycheck.io.storage import Recording, load


def recorded_session_headers(meta: dict[str, Any]) -> tuple[str, ...]:
    """Session headers the recorder was told about (`proxycheck_session_header`), if any."""
    source = meta.get("source")
    names = source.get("session_headers") if isinstance(source, dict) else None
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


@dataclass
class LoadedRecording:
    """One recording and its analysis, computed when first asked for and kept."""

    recording: Recording
    session_headers: tuple[str, ...] | None = None
    session_fields: tuple[str, ...] | None = None
    where: str = field(default="")

    @property
    def warnings(self) -> list[str]:
        return [str(w) for w in self.recording.warnings]

    @cached_property
    def summaries(self) -> list[SessionSummary]:
        """The sessions as `proxycheck sessions` shows them."""
        headers = self.session_headers or recorded_session_headers(self.recording.meta) + DEFAULT_SESSION_HEADERS
        return summarize_sessions(
            self.recording.exchanges, self.recording.piece,
            session_headers=headers, session_fields=self.session_fields or DEFAULT_SESSION_FIELDS,
        )  # fmt: skip

    @cached_property
    def planned(self) -> list[PlannedSession]:
        """The sessions as a replay sends them; a recording without one LLM request is bad input."""
        try:
            sessions = plan_sessions(self.recording.exchanges, self.recording.piece, self.summaries)
        except ValueError as exc:
            raise BadInput(self.where, str(exc)) from None
        if not sessions:
            raise BadInput(self.where, "holds no LLM requests to replay")
        return sessions


def open_recording(
    directory: str,
    *,
    session_headers: tuple[str, ...] | None = None,
    session_fields: tuple[str, ...] | None = None,
) -> LoadedRecording:
    """The recording in `directory`, loaded (bad input raises `BadInput` naming the file)."""
    return LoadedRecording(load(directory), session_headers, session_fields, where=directory)
