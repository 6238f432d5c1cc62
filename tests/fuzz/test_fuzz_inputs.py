"""Mutated inputs through the commands that read them: chain files through `replay --dry-run`,
HAR and mitmproxy `.flow` files through `import` (and what imports through `export` and
`replay --dry-run`). Whatever the damage, no traceback: a command either works, or fails with
exit 2 and one line `proxycheck: FILE...: PROBLEM` naming the file it could not use.

Seeded (the same cases every run) and bounded: a few hundred cases, in this process
(`cli_runner.main_output`), well under 30 s on a loaded machine. A failing case is written to
the test's temporary directory and named in the assertion, with the traceback, to reproduce it.
"""

from __future__ import annotations

import io
import json
import random
import traceback
from pathlib import Path
from typing import Any, Callable

import pytest
from cli_runner import main_output
from mitmproxy.io import FlowWriter, tnetstring
from mitmproxy.test import tflow, tutils

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "replays" / "example-agent"
CHROME_HAR = REPO / "tests" / "fixtures" / "har" / "chrome-chat.har"
SEED = 16
ENV = {"FUZZ_KEY": "k-123", "FUZZ_EMPTY": "", "FUZZ_BAD": "a\nb", "FUZZ_SPACE": " padded "}

CHAIN = """engine = "http://127.0.0.1:30000"
[engine_options]
headers = { Authorization = "Bearer ${FUZZ_KEY}" }
query = { api_key = "${FUZZ_KEY}" }
verify = true

[[hop]]
name = "corp"
proxy = "http://user:pw@127.0.0.1:3128"
headers = { "x-team" = "t1" }

[[hop]]
name = "edge"
url = "https://127.0.0.1:8443/prefix"
verify = false
headers = { "x-api-key" = "${FUZZ_KEY}" }
query = { key = "${FUZZ_KEY}" }
"""

# Values a mutation puts where a chain file's value was: wrong types, bad URLs, huge strings.
CHAIN_VALUES = [
    "1", "-1", "3.5", "nan", "inf", "true", "[]", "[1, 2]", "{}", "{ a = 1 }", '""', '"x"', "1979-05-27",
    '"http://[::1"', '"http://[::1]:99999"', '"http://h:0"', '"ftp://h"', '"http://"', '"http://u:p@h:1"',
    '"http://h:1/?q=1"', '"http://h:1#f"', '"http://exa mple:1"', '"http://h\\u0000:1"', '"${UNSET_FUZZ_VAR}"',
    '"${FUZZ_EMPTY}"', '"${FUZZ_BAD}"', '"${FUZZ_SPACE}"', '"a\\r\\nb"', '"\\u00e9"', '"\\u0000"',
    '"' + "x" * 200_000 + '"', '"' + "${FUZZ_KEY}" * 2_000 + '"', "{ " + ", ".join(f"k{i} = {i}" for i in range(300)) + " }",
    "[" * 60 + "]" * 60, '{ "" = "x" }', '{ "a b" = "x" }', '{ Connection = "x" }', '{ A = "1", a = "2" }',
]  # fmt: skip
CHAIN_KEYS = ["engine", "engine_options", "hop", "name", "url", "proxy", "headers", "query", "verify", "header",
              "urls", "colour", "engine_option", '"quoted key"', "a.b"]  # fmt: skip
NOISE = [b"\x00", b"\xff", b"\xc3", b"\n", b"\r", b'"', b"'", b"[", b"]", b"{", b"}", b"=", b"#", b"\\", b",", b" ",
         b"[[hop]]\n", b"\t", b"\xe2\x80\xa8"]  # fmt: skip


class Failures:
    """What went wrong across the cases: each is kept on disk and described."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.found: list[str] = []

    def check(self, capsys, case: str, argv: list[str], named: list[str], *, ok: tuple[int, ...] = (0,)) -> int:
        """Run `proxycheck ARGV`; a traceback, or a failure that is not one line naming one of
        `named`, is noted. Returns the exit status (-1 for a traceback)."""
        try:
            status, _, err = main_output(capsys, *argv)
        except BaseException:  # noqa: BLE001 - a traceback is exactly what is looked for
            capsys.readouterr()
            self.found.append(f"{case}: proxycheck {' '.join(argv)}: traceback\n{traceback.format_exc(limit=-6)}")
            return -1
        if status in ok:
            return status
        lines = [line for line in err.splitlines() if not line.startswith("proxycheck: warning: ")]
        if status != 2:
            self.found.append(f"{case}: proxycheck {' '.join(argv)}: exit {status}\n{err[-2000:]}")
        elif len(lines) != 1 or not any(lines[0].startswith(f"proxycheck: {n}") for n in named):
            self.found.append(f"{case}: proxycheck {' '.join(argv)}: not one line naming {named}:\n{err[-2000:]}")
        return status

    def assert_none(self) -> None:
        assert not self.found, f"{len(self.found)} case(s) failed (inputs in {self.tmp}):\n\n" + "\n\n".join(self.found[:8])


# --------------------------------------------------------------------------------------------
# Chain files


def mutate_chain(rng: random.Random, text: str) -> bytes:
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(7)
        at = rng.randrange(len(lines))
        if kind == 0 and "=" in lines[at]:  # a value of the wrong type, a bad URL, a huge string
            key = lines[at].split("=", 1)[0]
            lines[at] = f"{key}= {rng.choice(CHAIN_VALUES)}"
        elif kind == 1:  # an unknown (or misplaced) key
            lines.insert(at, f"{rng.choice(CHAIN_KEYS)} = {rng.choice(CHAIN_VALUES)}")
        elif kind == 2:
            lines.insert(at, lines[rng.randrange(len(lines))])  # a duplicated line
        elif kind == 3:
            other = rng.randrange(len(lines))
            lines[at], lines[other] = lines[other], lines[at]
        elif kind == 4:
            del lines[at]
        elif kind == 5:
            lines.insert(at, rng.choice(["[engine_options]", "[[hop]]", "[hop]", "[hop.headers]", "[engine_options.query]",
                                         "[[engine_options]]", "[x]"]))  # fmt: skip
        else:
            break
    data = bytearray("\n".join(lines).encode("utf-8"))
    for _ in range(rng.choice([0, 0, 1, 2, 4])):  # byte flips
        at = rng.randrange(len(data) + 1)
        data[at:at + rng.randint(0, 2)] = rng.choice(NOISE)
    if rng.random() < 0.1:
        data = data[: rng.randrange(len(data) + 1)]  # cut short
    return bytes(data)


def test_mutated_chain_files_through_replay_dry_run(tmp_path: Path, capsys, monkeypatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("UNSET_FUZZ_VAR", raising=False)
    rng = random.Random(SEED)
    failures = Failures(tmp_path)
    statuses: dict[int, int] = {}
    for i in range(220):
        path = tmp_path / f"chain-{i}.toml"
        path.write_bytes(mutate_chain(rng, CHAIN))
        # Either the chain is refused naming it (or the CA file its verify names), or the dry run works.
        status = failures.check(capsys, f"chain {i}", ["replay", str(EXAMPLE), "--chain", str(path), "--dry-run"],
                                [str(path)] + [f"{v}: cannot load it as a CA file" for v in ("x", '"x"')])  # fmt: skip
        statuses[status] = statuses.get(status, 0) + 1
    failures.assert_none()
    assert statuses.get(2, 0) > 100 and statuses.get(0, 0) > 5, statuses  # the mutations do reach both ends


# --------------------------------------------------------------------------------------------
# HAR and .flow files through import, export and replay --dry-run


def mutate_json(rng: random.Random, doc: Any) -> Any:
    """`doc` with one value somewhere replaced: a wrong type, NaN, a huge number, deep nesting."""
    replacements: list[Callable[[], Any]] = [
        lambda: None, lambda: 0, lambda: -1, lambda: 10**30, lambda: 1e308, lambda: float("nan"),
        lambda: float("inf"), lambda: "", lambda: "x" * 100_000, lambda: [], lambda: {}, lambda: True,
        lambda: "http://[::1/v1", lambda: "\ud800", lambda: "9999-12-31T23:59:59-23:59", lambda: "0001-01-01T00:00:00+14:00",
        lambda: [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]], lambda: {"a": {"b": {"c": {"d": {"e": {}}}}}},
    ]  # fmt: skip
    node = doc
    for _ in range(rng.randint(1, 8)):
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
        if not children:
            break
        key, child = rng.choice(children)
        if not isinstance(child, (dict, list)) or rng.random() < 0.25:
            if isinstance(node, dict) and rng.random() < 0.2:
                del node[key]
            else:
                node[key] = rng.choice(replacements)()
            return doc
        node = child
    return doc


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    kind = rng.randrange(4)
    if kind == 0:
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(out))
            out[at] = rng.randrange(256)
    elif kind == 1:
        out = out[: rng.randrange(len(out))]
    elif kind == 2:
        at = rng.randrange(len(out))
        out[at:at] = rng.choice(NOISE) * rng.randint(1, 3)
    else:
        a, b = sorted(rng.randrange(len(out)) for _ in range(2))
        out[a:a] = out[a:b]  # a span repeated
    return bytes(out)


def har_bases(tmp: Path, capsys) -> list[Any]:
    own = tmp / "own.har"
    status, _, err = main_output(capsys, "export", str(EXAMPLE), "--har", str(own))
    assert status == 0, err
    return [json.loads(own.read_text()), json.loads(CHROME_HAR.read_text())]


def through_the_commands(failures: Failures, capsys, case: str, source: Path, out: Path, chain: Path) -> None:
    """`import SOURCE --out OUT`; what imports is exported and dry-run replayed too."""
    status = failures.check(capsys, case, ["import", str(source), "--out", str(out), "--all"], [str(source)])
    if status != 0:
        return
    exported = out.with_suffix(".again.har")
    failures.check(capsys, case + " (export)", ["export", str(out), "--har", str(exported)], [str(out)])
    failures.check(capsys, case + " (replay --dry-run)", ["replay", str(out), "--chain", str(chain), "--dry-run"],
                   [str(out)])  # fmt: skip


def test_mutated_har_files_through_import_export_and_replay(tmp_path: Path, capsys) -> None:
    rng = random.Random(SEED + 1)
    failures = Failures(tmp_path)
    chain = tmp_path / "chain.toml"
    chain.write_text('engine = "http://127.0.0.1:30000"\n')
    bases = har_bases(tmp_path, capsys)
    for i in range(140):
        base = bases[i % len(bases)]
        path = tmp_path / f"case-{i}.har"
        if i % 3 == 2:
            data = mutate_bytes(rng, json.dumps(base).encode())
        else:
            doc = json.loads(json.dumps(base))
            for _ in range(rng.randint(1, 4)):
                doc = mutate_json(rng, doc)
            data = json.dumps(doc).encode("utf-8", "surrogatepass")
        path.write_bytes(data)
        through_the_commands(failures, capsys, f"har {i}", path, tmp_path / f"rec-{i}", chain)
    failures.assert_none()


def flows_bytes() -> bytes:
    buffer = io.BytesIO()
    writer = FlowWriter(buffer)
    for i in range(3):
        req = tutils.treq(method=b"POST", path=b"/v1/chat/completions?x=1",
                          content=b'{"messages":[{"role":"user","content":"hi"}],"stream":true}',
                          timestamp_start=1000.0 + i, timestamp_end=1000.01 + i)  # fmt: skip
        resp = tutils.tresp(headers=tutils.http.Headers(content_type="text/event-stream"),
                            content=b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\ndata: [DONE]\n\n',
                            timestamp_start=1000.2 + i, timestamp_end=1000.3 + i)  # fmt: skip
        writer.add(tflow.tflow(req=req, resp=resp, err=tflow.terr() if i == 2 else False))
    return buffer.getvalue()


def mutate_flow_state(rng: random.Random, data: bytes) -> bytes:
    """One flow's state (a tnetstring dictionary) with a value replaced, written back."""
    states = []
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        states.append(tnetstring.load(stream))
    index = rng.randrange(len(states))
    state = states[index]
    node = state
    for _ in range(rng.randint(1, 4)):
        children = [k for k, v in node.items() if isinstance(v, dict) and v]
        if not children or rng.random() < 0.3:
            break
        node = node[rng.choice(children)]
    key = rng.choice(list(node))
    node[key] = rng.choice([None, 0, -1, 10**15, 1.5, float("nan"), b"", b"\xff\xfe", "text", [], {}, True, [b"a"]])
    return b"".join(tnetstring.dumps(s) for s in states)


def test_mutated_flow_files_through_import_export_and_replay(tmp_path: Path, capsys) -> None:
    rng = random.Random(SEED + 2)
    failures = Failures(tmp_path)
    chain = tmp_path / "chain.toml"
    chain.write_text('engine = "http://127.0.0.1:30000"\n')
    base = flows_bytes()
    for i in range(120):
        data = mutate_flow_state(rng, base) if i % 2 else mutate_bytes(rng, base)
        if i % 7 == 0:
            data += rng.choice([b"5:hello,", b"999999999999:x", b"3:abc]", b"0:~", b"12"])
        path = tmp_path / f"case-{i}.flow"
        path.write_bytes(data)
        through_the_commands(failures, capsys, f"flow {i}", path, tmp_path / f"rec-{i}", chain)
    failures.assert_none()
