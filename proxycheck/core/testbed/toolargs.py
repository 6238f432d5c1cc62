"""The reference engine's tool calls a real harness can run: which offered tool it calls, and
arguments valid against that tool's JSON Schema.

The choice is harness-safe: among the offered tools the engine calls one whose name says it only
reads (Read, Glob, Grep, LS, cat, read_file, list_files, search, view ...), else a shell (Bash,
shell, exec_command: it is given a harmless command, `ls`), else one it cannot place, and a tool
that writes or changes things (Write, Edit, apply_patch, delete ...) only when nothing else is
offered. Names are read word by word (`read_file`, `NotebookEdit`, `mcp__fs__list_directory`).

The arguments follow the schema: required properties always, optional ones mostly left out (a
few harmless kinds, booleans, enums and constants, sometimes); `type` (a list of types too),
`enum`, `const`, `minimum`/`maximum` (and their exclusive forms, `multipleOf`),
`minLength`/`maxLength`, `minItems`/`maxItems`/`uniqueItems`, `items` (and tuple forms),
nested objects, `additionalProperties: false` (nothing undeclared), `allOf` (merged), `anyOf`
and `oneOf` (one branch, a non-null one when there is one) and `$ref` within the schema
(`#/$defs/...`, `#/definitions/...`, `#`), to a bounded depth so recursive schemas end. `pattern`
and `format` are not solved in general (a few formats get a fitting value). Values are chosen so
a harness can run the call in a test directory without harm: a file path is `README.md`, a
directory `.`, a glob `*`, a search pattern `README`, a command `ls` (`["ls"]` as an array), a
risky-sounding flag (force, recursive, dangerous ...) false.

A command (the engine's `--tool-command CMD`, None by default) changes both: a shell is called
whenever one is offered (a tool of the RUNS tier, before the read-only ones), and its command is
CMD (`["sh", "-c", CMD]` as an array), so a harness runs something that takes the time CMD takes
(`sleep 3; ls`: it sits idle on its connection for three seconds, as one running a build does).

Everything is drawn from the caller's `random.Random`, walking properties in sorted order (the
order of members is not content: a gateway that re-serializes the schema must not change the
answer), so the same request gets the same call.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, Mapping, Sequence

# How deep schemas are followed ($ref, nesting); past it a value is the simplest of its type.
MAX_DEPTH = 8
# Probability that an optional property of a harmless kind (boolean, enum, const) is given.
OPTIONAL_RATE = 0.25

_WORDS = ("stream", "proxy", "engine", "token", "event", "session", "turn", "buffer", "context", "request")

# Tiers of tools, safest first (see the module docstring).
READS, RUNS, UNKNOWN, WRITES = 0, 1, 2, 3
_WRITE_WORDS = frozenset({
    "write", "edit", "multiedit", "patch", "apply", "delete", "remove", "rm", "rmdir", "unlink", "create", "update",
    "move", "mv", "rename", "replace", "insert", "kill", "put", "post", "save", "upload", "send", "commit", "push",
    "install", "set", "modify", "append", "mkdir", "touch", "chmod", "truncate", "drop", "reset", "restore",
})
_RUN_WORDS = frozenset({
    "bash", "shell", "sh", "zsh", "exec", "execute", "run", "command", "terminal", "powershell", "cmd", "python",
    "eval", "spawn", "subprocess",
})
# Read-only words that reach outside the test directory (the network, images): no better than unknown.
_REMOTE_WORDS = frozenset({"web", "url", "http", "https", "browser", "fetch", "download", "image", "screenshot"})
_READ_WORDS = frozenset({
    "read", "glob", "grep", "rg", "ls", "list", "cat", "view", "search", "find", "get", "show", "lookup", "head",
    "tail", "stat", "tree", "open", "inspect", "locate", "describe", "query", "dir", "print", "peek",
})
_RISKY_FLAG_WORDS = frozenset({
    "danger", "dangerous", "dangerously", "force", "overwrite", "recursive", "delete", "unsafe", "sandbox",
    "escalate", "escalated", "sudo", "replace", "all", "write", "background", "privileged", "yolo",
})
_FILE_WORDS = frozenset({"file", "filepath", "filename", "notebook"})
_DIR_WORDS = frozenset({"dir", "directory", "folder", "workdir", "cwd", "root", "workspace"})
_FILE_TOOL_WORDS = frozenset({"read", "cat", "view", "open", "head", "tail"})
_GLOB_TOOL_WORDS = frozenset({"glob", "ls", "list", "find", "tree", "locate"})
_COMMAND_WORDS = frozenset({"command", "cmd", "script", "argv", "commandline"})
_SEARCH_WORDS = frozenset({"regex", "query", "q", "search", "keyword", "keywords", "term", "needle"})
_OBVIOUS_WORDS = _FILE_WORDS | _DIR_WORDS | _COMMAND_WORDS | _SEARCH_WORDS | {"path", "paths", "glob", "pattern"}


def words_of(name: str) -> tuple[str, ...]:
    """The words of a tool or property name, lower case: `NotebookEdit` -> (notebook, edit),
    `read_file` -> (read, file), `LS` -> (ls,), `-i` -> (i,)."""
    return tuple(w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name))


def tier_of(name: str) -> int:
    """How safe calling a tool of this name is in a test directory: READS < RUNS < UNKNOWN < WRITES."""
    words = set(words_of(name))
    if words & _WRITE_WORDS:
        return WRITES
    if words & _RUN_WORDS:
        return RUNS
    if words & _REMOTE_WORDS:
        return UNKNOWN
    if words & _READ_WORDS:
        return READS
    return UNKNOWN


def choose_tool(tools: Sequence[tuple[str, Mapping[str, Any]]], rnd: random.Random, *,
                runs: bool = False) -> tuple[str, Mapping[str, Any]]:  # fmt: skip
    """One of the offered (name, schema) tools: a draw among those of the safest tier offered,
    in the order offered; `runs`: among the shells when one is offered (a command was given)."""
    tiers = {tier_of(name) for name, _ in tools}
    wanted = RUNS if runs and RUNS in tiers else min(tiers)
    candidates = [tool for tool in tools if tier_of(tool[0]) == wanted]
    return candidates[rnd.randrange(len(candidates))]


def arguments_for(tool: str, schema: Mapping[str, Any], rnd: random.Random, *,
                  command: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Arguments for a call of `tool`, valid against its `schema` (see the module docstring);
    `command`: what a command argument holds (None: `ls`)."""
    if not isinstance(schema, Mapping):
        schema = {}
    if not schema.get("properties") and not schema.get("required") and not _closed(schema) and not _combined(schema):
        # A schema that says nothing about its members: one plausible argument.
        return {"query": rnd.choice(_WORDS)}
    value = _Generator(schema, rnd, frozenset(words_of(tool)), command).value(schema, "", 0)
    return value if isinstance(value, dict) else {}


def _closed(schema: Mapping[str, Any]) -> bool:
    return schema.get("additionalProperties") is False or schema.get("unevaluatedProperties") is False


def _combined(schema: Mapping[str, Any]) -> bool:
    return any(key in schema for key in ("$ref", "allOf", "anyOf", "oneOf"))


class _Generator:
    """One tool's argument generation: the root schema ($ref targets), the draws, the tool's words."""

    def __init__(self, root: Mapping[str, Any], rnd: random.Random, tool_words: frozenset[str],
                 command: str | None = None) -> None:  # fmt: skip
        self.root = root
        self.rnd = rnd
        self.tool_words = tool_words
        self.command = command

    def value(self, schema: Any, name: str, depth: int) -> Any:
        """A value valid against `schema` for a property called `name`."""
        if schema is True or not isinstance(schema, Mapping):
            return self._string({}, name)
        schema = self._resolved(schema, depth)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.rnd.choice(schema["enum"])
        kind = self._type(schema)
        if depth >= MAX_DEPTH:
            return _simplest(kind)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, name, depth)
        if kind in ("integer", "number"):
            return self._number(schema, name, kind)
        if kind == "boolean":
            return self._boolean(name)
        if kind == "null":
            return None
        return self._string(schema, name)

    # -------------------------------------------------------------------- schema combinators

    def _resolved(self, schema: Mapping[str, Any], depth: int) -> Mapping[str, Any]:
        """`schema` with its $ref, allOf and one anyOf/oneOf branch folded in (bounded)."""
        for _ in range(MAX_DEPTH):
            ref = schema.get("$ref")
            if isinstance(ref, str):
                target = self._target(ref) if depth < MAX_DEPTH else None
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = {**target, **rest} if isinstance(target, Mapping) else rest
                depth += 1
                continue
            parts = schema.get("allOf")
            if isinstance(parts, list):
                merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
                for part in parts:
                    if isinstance(part, Mapping):
                        merged = _merge(merged, self._resolved(part, depth + 1))
                schema = merged
                continue
            for key in ("oneOf", "anyOf"):
                branches = schema.get(key)
                if isinstance(branches, list) and branches:
                    rest = {k: v for k, v in schema.items() if k != key}
                    branch = self._branch(branches)
                    schema = _merge(rest, self._resolved(branch, depth + 1)) if isinstance(branch, Mapping) else rest
                    break
            else:
                return schema
        return schema

    def _target(self, ref: str) -> Any:
        """What a reference within the schema points at (None when it leaves the schema)."""
        if not ref.startswith("#"):
            return None
        node: Any = self.root
        for raw in ref[1:].split("/")[1:]:
            key = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return None
        return node

    def _branch(self, branches: list[Any]) -> Any:
        """One branch: a draw among those that are not just null (null only when nothing else)."""
        real = [b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")]
        pool = real or branches
        return pool[self.rnd.randrange(len(pool))]

    def _type(self, schema: Mapping[str, Any]) -> str:
        kind = schema.get("type")
        if isinstance(kind, list):
            named = [k for k in kind if isinstance(k, str) and k != "null"]
            kind = named[0] if named else (kind[0] if kind else None)
        if isinstance(kind, str):
            return kind
        if "properties" in schema or "required" in schema or "additionalProperties" in schema:
            return "object"
        if "items" in schema or "prefixItems" in schema or "minItems" in schema:
            return "array"
        if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
            return "number"
        return "string"

    # ------------------------------------------------------------------------------ values

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        out: dict[str, Any] = {}
        for key in sorted({k for k in required if isinstance(k, str)}):
            out[key] = self.value(props.get(key, True), key, depth + 1)
        optional = [k for k in sorted(props) if k not in out]
        at_least = schema.get("minProperties") if isinstance(schema.get("minProperties"), int) else 0
        for key in optional:
            spec = props[key]
            if len(out) < at_least or (_harmless(spec) and self.rnd.random() < OPTIONAL_RATE):
                out[key] = self.value(spec, key, depth + 1)
        if not out:
            # Nothing required: a model still gives a tool its obvious argument (a path, a
            # pattern ...), one whose harmless value is known.
            known = [k for k in optional if _obvious(k, props[k])]
            if known:
                out[known[0]] = self.value(props[known[0]], known[0], depth + 1)
        return out

    def _array(self, schema: Mapping[str, Any], name: str, depth: int) -> list[Any]:
        low = schema.get("minItems") if isinstance(schema.get("minItems"), int) else 0
        high = schema.get("maxItems") if isinstance(schema.get("maxItems"), int) else None
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # the tuple form before draft 2020-12
            prefix, items = items, schema.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        count = max(low, 1, len(prefix) if low else 0)
        if high is not None:
            count = min(count, high)
        words = set(words_of(name))
        item_schema = items if isinstance(items, Mapping) else {}
        if words & _COMMAND_WORDS and not prefix and self._type(self._resolved(item_schema, depth)) == "string":
            # A command as argv: a harmless one, padded with harmless arguments if more are required;
            # a given command through the shell.
            if self.command is not None:
                return ["sh", "-c", self.command]
            return (["ls", "."] + ["-a"] * count)[: max(count, 1)]
        out: list[Any] = []
        seen: set[str] = set()
        for index in range(count):
            spec = prefix[index] if index < len(prefix) else items
            choices = self._resolved(spec, depth + 1).get("enum") if isinstance(spec, Mapping) else None
            unused = [c for c in choices if _canonical(c) not in seen] if isinstance(choices, list) else []
            if schema.get("uniqueItems") and unused:
                value = unused[self.rnd.randrange(len(unused))]  # an enum value not given yet
            else:
                for _ in range(8):  # uniqueItems: a few draws for a value not yet given
                    value = self.value(spec, name, depth + 1)
                    if not schema.get("uniqueItems") or _canonical(value) not in seen:
                        break
            seen.add(_canonical(value))
            out.append(value)
        return out

    def _number(self, schema: Mapping[str, Any], name: str, kind: str) -> int | float:
        low, high = _bound(schema, "minimum", "exclusiveMinimum", 1), _bound(schema, "maximum", "exclusiveMaximum", -1)
        words = set(words_of(name))
        if "timeout" in words:
            wanted: float = 60_000 if words & {"ms", "millis", "milliseconds"} else 60
        elif words & {"offset", "start", "line", "skip", "page", "index", "from"}:
            wanted = 1
        else:
            wanted = self.rnd.randrange(1, 21)
        if low is not None:
            wanted = max(wanted, low)
        if high is not None:
            wanted = min(wanted, high)
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
            multiple = -(-wanted // step) * step  # the first multiple at or above
            wanted = multiple if high is None or multiple <= high else (wanted // step) * step
        if kind == "integer":
            whole = int(wanted)
            if low is not None and whole < low:
                whole += 1
            return whole
        return int(wanted) if float(wanted).is_integer() else wanted

    def _boolean(self, name: str) -> bool:
        if set(words_of(name)) & _RISKY_FLAG_WORDS:
            return False
        return self.rnd.random() < 0.5

    def _string(self, schema: Mapping[str, Any], name: str) -> str:
        text = self._string_for(name, schema.get("format"))
        low = schema.get("minLength") if isinstance(schema.get("minLength"), int) else 0
        high = schema.get("maxLength") if isinstance(schema.get("maxLength"), int) else None
        if len(text) < low:
            text += "x" * (low - len(text))
        if high is not None:
            text = text[:high]
        return text

    def _string_for(self, name: str, fmt: Any) -> str:
        words = set(words_of(name))
        formats = {"uri": "https://example.com/", "url": "https://example.com/", "date-time": "2024-01-01T00:00:00Z",
                   "date": "2024-01-01", "time": "00:00:00Z", "email": "user@example.com",
                   "uuid": "00000000-0000-4000-8000-000000000000", "hostname": "localhost", "ipv4": "127.0.0.1"}
        if isinstance(fmt, str) and fmt in formats:
            return formats[fmt]
        if words & _COMMAND_WORDS:
            return "ls" if self.command is None else self.command
        if words & {"url", "uri", "link", "href"}:
            return "https://example.com/"
        if words & _DIR_WORDS:
            return "."
        if words & _FILE_WORDS:
            return "README.md"
        if "path" in words or "paths" in words:
            return "README.md" if self.tool_words & _FILE_TOOL_WORDS else "."
        if "glob" in words or "include" in words:
            return "*"
        if "pattern" in words:
            return "*" if self.tool_words & _GLOB_TOOL_WORDS and not self.tool_words & {"grep", "search"} else "README"
        if words & _SEARCH_WORDS:
            return "README"
        return f"{self.rnd.choice(_WORDS)} {self.rnd.choice(_WORDS)}"


def _obvious(name: str, spec: Any) -> bool:
    """Whether a property is a string the generator knows a harmless value for, by its name."""
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    return kind in (None, "string") and bool(set(words_of(name)) & _OBVIOUS_WORDS)


def _harmless(spec: Any) -> bool:
    """Whether an optional property is of a kind worth sometimes giving (it cannot do harm)."""
    if not isinstance(spec, Mapping):
        return False
    return "const" in spec or isinstance(spec.get("enum"), list) or spec.get("type") == "boolean"


def _bound(schema: Mapping[str, Any], inclusive: str, exclusive: str, direction: int) -> float | None:
    """The tightest bound of one side (draft 4's boolean exclusive forms too); None when unbounded."""
    bounds = []
    value = schema.get(inclusive)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if schema.get(exclusive) is True:  # draft 4: exclusiveMinimum is a flag on minimum
            value = value + direction if float(value).is_integer() else value + direction * 1e-6
        bounds.append(value)
    value = schema.get(exclusive)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        bounds.append(value + direction if float(value).is_integer() else value + direction * 1e-6)
    if not bounds:
        return None
    return max(bounds) if direction > 0 else min(bounds)


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Two schemas that must both hold, as one: properties and required lists united."""
    out = dict(base)
    for key, value in extra.items():
        if key == "properties" and isinstance(out.get(key), Mapping) and isinstance(value, Mapping):
            out[key] = {**out[key], **value}
        elif key == "required" and isinstance(out.get(key), list) and isinstance(value, list):
            out[key] = [*out[key], *(v for v in value if v not in out[key])]
        elif key not in out:
            out[key] = value
    return out


def _simplest(kind: str) -> Any:
    return {"object": {}, "array": [], "integer": 0, "number": 0, "boolean": False, "null": None}.get(kind, "")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
