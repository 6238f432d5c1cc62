"""Points in the chain file: `point` on a hop or in engine_options places recorders (position i in
front of hops[i], len(hops) in front of the engine), the hops between two places, the run.json
document, and each mistake in a `point` as one line naming the file and line."""

from __future__ import annotations

import pytest

from proxycheck.core.errors import BadInput
from proxycheck.core.replay.chain import Chain, parse_chain

PLACED = """engine = "http://127.0.0.1:30000"
[engine_options]
point = "inner"
[[hop]]
name = "corp"
proxy = "http://127.0.0.1:3128"
point = ["client", "[::1]:8080"]
[[hop]]
name = "edge"
url = "http://127.0.0.1:8080"
point = "127.0.0.1:8080"
[[hop]]
name = "gateway"
url = "http://127.0.0.1:4000"
"""


def placed() -> Chain:
    return parse_chain(PLACED, {}, "chain.toml")


def error_of(text: str) -> str:
    with pytest.raises(BadInput) as info:
        parse_chain(text, {}, "chain.toml")
    message = str(info.value)
    assert len(message.splitlines()) == 1
    return message


def test_points_are_placed_on_hops_and_in_front_of_the_engine_in_file_order() -> None:
    chain = placed()
    assert chain.points == (("inner", 3), ("client", 0), ("[::1]:8080", 0), ("127.0.0.1:8080", 1))
    assert [chain.point_position(n) for n in ("client", "[::1]:8080", "127.0.0.1:8080", "inner")] == [0, 0, 1, 3]
    assert chain.point_position("elsewhere") is None
    assert chain.point_position("corp") is None  # hop names are not points


def test_engine_options_after_the_hops_come_last() -> None:
    text = PLACED.replace('[engine_options]\npoint = "inner"\n', "") + '[engine_options]\npoint = ["inner", "inner-2"]\n'
    assert parse_chain(text, {}, "chain.toml").points == (
        ("client", 0), ("[::1]:8080", 0), ("127.0.0.1:8080", 1), ("inner", 3), ("inner-2", 3))  # fmt: skip


def test_hops_between_two_positions() -> None:
    chain = placed()
    assert chain.hops_between(0, 3) == ("corp", "edge", "gateway")
    assert chain.hops_between(0, 1) == ("corp",)
    assert chain.hops_between(1, 3) == ("edge", "gateway")
    assert chain.hops_between(2, 2) == ()  # two recorders at one place
    assert chain.hops_between(3, 1) == ("edge", "gateway")  # a segment spans the same hops either way
    outer, inner = chain.point_position("client"), chain.point_position("inner")
    assert outer is not None and inner is not None and chain.hops_between(outer, inner) == ("corp", "edge", "gateway")
    with pytest.raises(ValueError):
        chain.hops_between(0, 4)


def test_points_in_inline_tables() -> None:
    text = ('engine = "http://e"\nengine_options = { point = "in" }\n'
            'hop = [{ name = "a", url = "http://a", point = ["x", "y"] }, { name = "b", url = "http://b" }]\n')  # fmt: skip
    chain = parse_chain(text, {}, "chain.toml")
    assert chain.points == (("in", 2), ("x", 0), ("y", 0)) and chain.hops_between(0, 2) == ("a", "b")


def test_to_doc_keeps_the_positions() -> None:
    doc = placed().to_doc()
    assert doc["points"] == {"inner": 3, "client": 0, "[::1]:8080": 0, "127.0.0.1:8080": 1}
    assert list(doc) == ["source", "engine", "engine_headers", "hops", "points"]


def test_a_chain_without_points_is_unchanged() -> None:
    without = "\n".join(line for line in PLACED.splitlines() if not line.startswith("point")) + "\n"
    chain = parse_chain(without, {}, "chain.toml")
    assert chain.points == () and chain.point_position("client") is None
    assert "points" not in chain.to_doc()
    assert chain == Chain(chain.engine, hops=chain.hops, source="chain.toml")
    # The points change nothing else: hops, routes and the document are those of the file without them.
    with_points = placed()
    assert with_points.hops == chain.hops and with_points.routes() == chain.routes()
    assert {k: v for k, v in with_points.to_doc().items() if k != "points"} == chain.to_doc()


HOP = 'engine = "http://e"\n[[hop]]\nname = "edge"\nurl = "http://a"\n'
ENGINE = 'engine = "http://e"\n[engine_options]\n'
RULE = "(a point name is 1-64 characters: letters, digits and . _ : @ [ ] -)"


@pytest.mark.parametrize(
    "text,expected",
    [
        # Not a name or a list of names.
        (HOP + "point = 3\n", 'chain.toml:5: hop "edge": point must be a name or a list of names, in quotes (got a number)'),
        (ENGINE + "point = true\n",
         "chain.toml:3: engine_options: point must be a name or a list of names, in quotes (got a boolean)"),
        (ENGINE + "point = { a = 1 }\n",
         "chain.toml:3: engine_options: point must be a name or a list of names, in quotes (got a table)"),
        (HOP + 'point = ["a", 2]\n',
         'chain.toml:5: hop "edge": point must be a name or a list of names, in quotes (got a list holding a number)'),
        (HOP + "point = []\n",
         'chain.toml:5: hop "edge": point = [] names no point: give a name, a list of names (point = ["a", "b"]), '
         "or no point key"),
        # Names: characters and length.
        (HOP + 'point = "a b"\n', f'chain.toml:5: hop "edge": point name "a b" has " " in it {RULE}'),
        (ENGINE + 'verify = true\npoint = ["ok", "x/y"]\n', f'chain.toml:4: engine_options: point name "x/y" has "/" in it {RULE}'),
        (HOP + 'point = "tab\\there"\n', f'chain.toml:5: hop "edge": point name "tab\\there" has "\\t" in it {RULE}'),
        (HOP + 'point = "é"\n', f'chain.toml:5: hop "edge": point name "é" has "é" in it {RULE}'),
        (HOP + 'point = ""\n', f'chain.toml:5: hop "edge": point name "" is empty {RULE}'),
        (HOP + 'point = "%s"\n' % ("x" * 65),
         'chain.toml:5: hop "edge": point name "xxxxxxxxxxxxxxxxxxxx"... is 65 characters long (at most 64)'),
        # Unique in the whole file: the second is named, with the line of the first.
        (HOP + 'point = ["a", "a"]\n', "chain.toml:5: point names must be unique: a is given twice"),
        (ENGINE + 'point = "a"\n[[hop]]\nname = "edge"\nurl = "http://a"\npoint = "a"\n',
         "chain.toml:7: point names must be unique: a is given twice (first at line 3)"),
        (HOP + 'point = "a"\n[engine_options]\npoint = ["b", "a"]\n',
         "chain.toml:7: point names must be unique: a is given twice (first at line 5)"),
        (HOP + 'point = [\n  "a",\n  "b",\n]\n[[hop]]\nname = "gw"\nurl = "http://g"\npoint = "b"\n',
         "chain.toml:12: point names must be unique: b is given twice (first at line 5)"),
        ('engine = "http://e"\nhop = [\n  { name = "a", url = "http://a", point = "x" },\n  { name = "b", url = "http://b", point = "x" },\n]\n',
         "chain.toml:2: point names must be unique: x is given twice"),
        # The known keys still suggest the close one.
        (HOP + 'points = "a"\n', 'chain.toml:5: hop "edge": unknown key "points" (did you mean "point"?)'),
        (ENGINE + 'pointt = "a"\n', 'chain.toml:3: engine_options: unknown key "pointt" (did you mean "point"?)'),
    ],
)
def test_each_point_mistake_is_one_line_naming_the_file_and_line(text: str, expected: str) -> None:
    assert error_of(text) == expected


@pytest.mark.parametrize("name", ["a", "127.0.0.1:8080", "[::1]:8080", "rec@host", "edge-in_2.b", "x" * 64])
def test_good_point_names(name: str) -> None:
    assert parse_chain(HOP + f'point = "{name}"\n', {}, "chain.toml").points == ((name, 0),)


def test_a_point_may_share_a_hop_name() -> None:
    # Points and hops are named apart: a recorder in front of hop edge may well be called edge.
    assert parse_chain(HOP + 'point = "edge"\n', {}, "chain.toml").points == (("edge", 0),)
