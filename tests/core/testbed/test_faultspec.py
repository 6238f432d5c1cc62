"""`--fault` specs for the reference engine: parsing, errors, and which faults fire."""

from __future__ import annotations

import pytest

from proxycheck.core.errors import BadInput
from proxycheck.core.testbed.faultspec import active_faults, parse_fault


def test_specs_parse() -> None:
    spec = parse_fault("stall:after=12,from_turn=4,p=0.5,seconds=30")
    assert (spec.kind, spec.params, spec.from_turn, spec.p) == ("stall", {"after": 12, "seconds": 30.0}, 4, 0.5)
    assert parse_fault("drop_terminal").kind == "drop_terminal"
    assert parse_fault("status:code=503").params == {"code": 503}
    pause = active_faults([parse_fault("pause:after=3,seconds=12.5,from_turn=2")], turn=2, draw=0)
    assert (pause.pause_after, pause.pause_seconds, pause.stall_after) == (3, 12.5, None)


@pytest.mark.parametrize(
    "text,message",
    [
        ("explode", "unknown fault 'explode'"),
        ("stall", "stall needs after=..."),
        ("stall:after=x", "after must be a number"),
        ("stall:after=3,colour=red", "stall takes after, seconds, from_turn, p, not 'colour'"),
        ("status:code=200", "code must be an HTTP error status"),
        ("close:after=2,p=2", "p must be between 0 and 1"),
        ("close:after", "'after' is not key=value"),
        ("pause:after=3", "pause needs seconds=..."),
    ],
)
def test_bad_specs_name_the_spec(text: str, message: str) -> None:
    with pytest.raises(BadInput, match=message) as info:
        parse_fault(text)
    assert str(info.value).startswith(f"--fault {text}: ")


def test_from_turn_gates_and_probability_is_seeded() -> None:
    specs = [parse_fault("stall:after=3,from_turn=2"), parse_fault("status:code=502,p=0.5")]
    assert active_faults(specs, turn=1, draw=0).stall_after is None
    assert active_faults(specs, turn=2, draw=0).stall_after == 3
    fired = [active_faults(specs, turn=1, draw=d).status for d in range(200)]
    assert 60 < fired.count(502) < 140  # about half, and the same every run
    assert fired == [active_faults(specs, turn=1, draw=d).status for d in range(200)]
