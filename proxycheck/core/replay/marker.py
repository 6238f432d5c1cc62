"""The header that marks proxycheck's own replays: the replayer and the prober send it (its value
is the run id), the recorder passes such requests through unrecorded, and `import` leaves them out."""

from __future__ import annotations

REPLAY_HEADER = "x-proxycheck-replay"
