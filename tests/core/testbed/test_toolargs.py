"""The reference engine's tool calls, pure: arguments valid against the offered JSON Schema (checked
with a real validator), and a choice of tool a real harness can run in a test directory."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.sse import SSEEvent, parse
from proxycheck.core.testbed import synth, toolargs, wire

TIMING = synth.Timing(ttft_base=0.0, ttft_per_kb=0.0, interval=0.0)
DRAFT7 = "http://json-schema.org/draft-07/schema#"

# Claude Code's tools as it sends them (`input_schema`: zod schemas as draft-07 JSON Schema,
# closed with additionalProperties false). Descriptions shortened.
CLAUDE_CODE = {
    "Task": {"type": "object", "properties": {
        "description": {"type": "string"}, "prompt": {"type": "string"}, "subagent_type": {"type": "string"}},
        "required": ["description", "prompt", "subagent_type"], "additionalProperties": False, "$schema": DRAFT7},
    "Bash": {"type": "object", "properties": {
        "command": {"type": "string", "description": "The command to execute"},
        "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
        "description": {"type": "string"},
        "run_in_background": {"type": "boolean"},
        "dangerouslyDisableSandbox": {"type": "boolean"}},
        "required": ["command"], "additionalProperties": False, "$schema": DRAFT7},
    "Glob": {"type": "object", "properties": {
        "pattern": {"type": "string", "description": "The glob pattern to match files against"},
        "path": {"type": "string", "description": "The directory to search in"}},
        "required": ["pattern"], "additionalProperties": False, "$schema": DRAFT7},
    "Grep": {"type": "object", "properties": {
        "pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"},
        "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
        "-B": {"type": "number"}, "-A": {"type": "number"}, "-C": {"type": "number"},
        "-n": {"type": "boolean"}, "-i": {"type": "boolean"}, "type": {"type": "string"},
        "head_limit": {"type": "number"}, "offset": {"type": "number"}, "multiline": {"type": "boolean"}},
        "required": ["pattern"], "additionalProperties": False, "$schema": DRAFT7},
    "LS": {"type": "object", "properties": {
        "path": {"type": "string", "description": "The absolute path to the directory to list"},
        "ignore": {"type": "array", "items": {"type": "string"}}},
        "required": ["path"], "additionalProperties": False, "$schema": DRAFT7},
    "Read": {"type": "object", "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file to read"},
        "offset": {"type": "number"}, "limit": {"type": "number"}},
        "required": ["file_path"], "additionalProperties": False, "$schema": DRAFT7},
    "Edit": {"type": "object", "properties": {
        "file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"},
        "replace_all": {"type": "boolean", "default": False}},
        "required": ["file_path", "old_string", "new_string"], "additionalProperties": False, "$schema": DRAFT7},
    "Write": {"type": "object", "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
              "required": ["file_path", "content"], "additionalProperties": False, "$schema": DRAFT7},
    "NotebookEdit": {"type": "object", "properties": {
        "notebook_path": {"type": "string"}, "cell_id": {"type": "string"}, "new_source": {"type": "string"},
        "cell_type": {"type": "string", "enum": ["code", "markdown"]},
        "edit_mode": {"type": "string", "enum": ["replace", "insert", "delete"]}},
        "required": ["notebook_path", "new_source"], "additionalProperties": False, "$schema": DRAFT7},
    "WebFetch": {"type": "object", "properties": {
        "url": {"type": "string", "format": "uri"}, "prompt": {"type": "string"}},
        "required": ["url", "prompt"], "additionalProperties": False, "$schema": DRAFT7},
    "TodoWrite": {"type": "object", "properties": {"todos": {"type": "array", "items": {
        "type": "object", "properties": {
            "content": {"type": "string", "minLength": 1},
            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
            "activeForm": {"type": "string", "minLength": 1}},
        "required": ["content", "status", "activeForm"], "additionalProperties": False}}},
        "required": ["todos"], "additionalProperties": False, "$schema": DRAFT7},
    "WebSearch": {"type": "object", "properties": {
        "query": {"type": "string", "minLength": 2},
        "allowed_domains": {"type": "array", "items": {"type": "string"}},
        "blocked_domains": {"type": "array", "items": {"type": "string"}}},
        "required": ["query"], "additionalProperties": False, "$schema": DRAFT7},
    "ExitPlanMode": {"type": "object", "properties": {"plan": {"type": "string"}}, "required": ["plan"],
                     "additionalProperties": False, "$schema": DRAFT7},
}

# Codex CLI's function tools (Responses API `parameters`, strict false).
CODEX = {
    "shell": {"type": "object", "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "The command to execute"},
        "workdir": {"type": "string", "description": "The working directory to execute the command in"},
        "timeout_ms": {"type": "number", "description": "The timeout for the command in milliseconds"},
        "with_escalated_permissions": {"type": "boolean"},
        "justification": {"type": "string"}},
        "required": ["command"], "additionalProperties": False},
    "update_plan": {"type": "object", "properties": {
        "explanation": {"type": "string"},
        "plan": {"type": "array", "items": {"type": "object", "properties": {
            "step": {"type": "string"}, "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}},
            "required": ["step", "status"], "additionalProperties": False}}},
        "required": ["plan"], "additionalProperties": False},
    "apply_patch": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"],
                    "additionalProperties": False},
    "view_image": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
                   "additionalProperties": False},
}

# Everything else the brief of a schema may hold: $ref to $defs (recursive too), anyOf/oneOf,
# const, bounds, array sizes, unique items, tuple items, nested closed objects, allOf.
STRUCTURED = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "range": {"type": "object", "properties": {"start": {"type": "integer", "minimum": 1},
                                                   "end": {"type": "integer", "exclusiveMinimum": 10, "maximum": 12}},
                  "required": ["start", "end"], "additionalProperties": False},
        "node": {"type": "object", "properties": {"name": {"type": "string"},
                                                  "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                 "required": ["name", "children"]},
    },
    "properties": {
        "kind": {"const": "search"},
        "mode": {"enum": ["fast", "exact", 3]},
        "lines": {"$ref": "#/$defs/range"},
        "tree": {"$ref": "#/$defs/node"},
        "target": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 3, "maxLength": 5}]},
        "choice": {"oneOf": [{"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
                              "additionalProperties": False},
                             {"type": "integer", "minimum": 100, "maximum": 100}]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 3,
                 "maxItems": 3, "uniqueItems": True},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "minItems": 2,
                 "items": False},
        "ratio": {"type": "number", "minimum": 0.25, "maximum": 0.75},
        "step": {"type": "integer", "multipleOf": 7, "minimum": 30},
        "nested": {"type": "object", "properties": {"inner": {"type": "object", "properties": {
            "flag": {"type": "boolean"}, "count": {"type": ["integer", "null"], "maximum": 0}},
            "required": ["flag", "count"], "additionalProperties": False}}, "required": ["inner"],
            "additionalProperties": False},
        "both": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                           {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]},
        "optional_text": {"type": "string"},
    },
    "required": ["kind", "mode", "lines", "tree", "target", "choice", "tags", "pair", "ratio", "step", "nested",
                 "both"],
    "additionalProperties": False,
}

ALL = {**{f"claude:{k}": v for k, v in CLAUDE_CODE.items()}, **{f"codex:{k}": v for k, v in CODEX.items()},
       "structured": STRUCTURED}


def validator(schema: dict) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.parametrize("key", sorted(ALL))
def test_arguments_are_valid_against_the_schema(key: str) -> None:
    schema = ALL[key]
    name = key.split(":")[-1]
    check = validator(schema)
    for seed in range(300):
        args = toolargs.arguments_for(name, schema, random.Random(seed))
        errors = [e.message for e in check.iter_errors(args)]
        assert not errors, (seed, args, errors)
        # Required members always, nothing undeclared.
        assert set(schema["required"]) <= set(args) <= set(schema["properties"])


def test_optional_properties_are_mostly_left_out_and_only_harmless_ones_given() -> None:
    given: dict[str, int] = {}
    for seed in range(400):
        for key in toolargs.arguments_for("Grep", CLAUDE_CODE["Grep"], random.Random(seed)):
            given[key] = given.get(key, 0) + 1
    assert given.pop("pattern") == 400
    # Free text and numbers that could change what runs (a glob, a file type, a line offset) never.
    assert not set(given) & {"glob", "type", "path", "-A", "-B", "-C", "head_limit", "offset"}
    assert given and all(count < 200 for count in given.values()), given  # enums and flags, sometimes
    shell = [toolargs.arguments_for("shell", CODEX["shell"], random.Random(s)) for s in range(200)]
    assert all(a.get("with_escalated_permissions", False) is False for a in shell)  # a risky flag is never set
    assert all("timeout_ms" not in a and "workdir" not in a for a in shell)


def test_values_are_harmless_in_a_test_directory() -> None:
    def args(name: str, schema: dict) -> dict:
        return toolargs.arguments_for(name, schema, random.Random(7))

    assert args("Read", CLAUDE_CODE["Read"])["file_path"] == "README.md"
    assert args("Glob", CLAUDE_CODE["Glob"])["pattern"] == "*"
    assert args("Grep", CLAUDE_CODE["Grep"])["pattern"] == "README"
    assert args("LS", CLAUDE_CODE["LS"])["path"] == "."
    assert args("Bash", CLAUDE_CODE["Bash"])["command"] == "ls"
    assert args("shell", CODEX["shell"])["command"] == ["ls"]
    assert args("view_image", CODEX["view_image"])["path"] == "README.md"  # a tool that views: a file
    # A tool that requires nothing still gets its obvious argument.
    loose = {"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}}
    assert args("read_file", loose) == {"path": "README.md"}
    assert args("list_files", loose) == {"path": "."}


def offered(names: list[str], table: dict) -> list[tuple[str, dict]]:
    return [(name, table[name]) for name in names]


def test_a_read_only_tool_is_chosen_over_ones_that_write_or_run() -> None:
    claude = offered(list(CLAUDE_CODE), CLAUDE_CODE)
    chosen = {toolargs.choose_tool(claude, random.Random(s))[0] for s in range(300)}
    assert chosen == {"Glob", "Grep", "LS", "Read"}  # each read-only tool, and only those
    # Codex offers no read-only tool by name: the shell, with a harmless command.
    codex = offered(list(CODEX), CODEX)
    assert {toolargs.choose_tool(codex, random.Random(s))[0] for s in range(100)} == {"shell"}
    # A tool that writes only when nothing else is offered.
    writers = offered(["Write", "Edit"], CLAUDE_CODE)
    assert {toolargs.choose_tool(writers, random.Random(s))[0] for s in range(50)} == {"Write", "Edit"}
    assert toolargs.choose_tool(offered(["Edit", "Task"], CLAUDE_CODE), random.Random(1))[0] == "Task"


@pytest.mark.parametrize("name,tier", [
    ("Read", toolargs.READS), ("read_file", toolargs.READS), ("list_files", toolargs.READS), ("cat", toolargs.READS),
    ("mcp__fs__list_directory", toolargs.READS), ("search", toolargs.READS), ("ls", toolargs.READS),
    ("Bash", toolargs.RUNS), ("shell", toolargs.RUNS), ("exec_command", toolargs.RUNS),
    ("WebFetch", toolargs.UNKNOWN), ("view_image", toolargs.UNKNOWN), ("Task", toolargs.UNKNOWN),
    ("Write", toolargs.WRITES), ("NotebookEdit", toolargs.WRITES), ("apply_patch", toolargs.WRITES),
    ("search_replace", toolargs.WRITES), ("TodoWrite", toolargs.WRITES),
])
def test_tool_names_are_read_word_by_word(name: str, tier: int) -> None:
    assert toolargs.tier_of(name) == tier


def anthropic_request(tools: dict, **extra) -> dict:
    return {"model": "claude", "max_tokens": 32000, "messages": [{"role": "user", "content": "look around"}],
            "tools": [{"name": n, "description": "d", "input_schema": s} for n, s in tools.items()], **extra}


def test_the_engine_calls_a_read_only_tool_with_valid_arguments_on_the_wire() -> None:
    calls = 0
    for turn in range(40):
        req = anthropic_request(CLAUDE_CODE, metadata={"user_id": f"u{turn}"}, system=f"turn {turn}")
        plan = synth.plan("anthropic_messages", req, json.dumps(req).encode(), TIMING, tool_call_rate=1.0)
        encoded = wire.encode("anthropic_messages", plan, wire.Meta("claude", 1))
        acc = dialects.accumulator("anthropic_messages")
        for event in parse(b"".join(data for _, data in encoded.events)):
            if isinstance(event, SSEEvent):
                acc.feed(event.type, event.data)
        (call,) = acc.result().tool_calls
        assert call.name in {"Read", "Glob", "Grep", "LS"} and call.arguments_valid
        assert not list(validator(CLAUDE_CODE[call.name]).iter_errors(call.parsed)), call.parsed
        calls += 1
    assert calls == 40


def test_the_same_request_gets_the_same_call_whatever_the_member_order() -> None:
    req = anthropic_request(CLAUDE_CODE)
    flipped = json.loads(json.dumps(req))
    for tool in flipped["tools"]:
        tool["input_schema"]["properties"] = dict(reversed(list(tool["input_schema"]["properties"].items())))
    first = synth.plan("anthropic_messages", req, json.dumps(req).encode(), TIMING, tool_call_rate=1.0)
    again = synth.plan("anthropic_messages", flipped, json.dumps(flipped).encode(), TIMING, tool_call_rate=1.0)
    assert first.tool_calls and first.tool_calls == again.tool_calls
    assert first == synth.plan("anthropic_messages", req, json.dumps(req).encode(), TIMING, tool_call_rate=1.0)


# Codex 0.171's unified shell (`exec_command`, the command one string) beside tools whose names say
# they read (`get_goal`): without a command the engine calls the reader.
CODEX_EXEC = {
    "exec_command": {"type": "object", "properties": {
        "cmd": {"type": "string", "description": "Shell command to execute."},
        "justification": {"type": "string"}, "login": {"type": "boolean"}, "yield_time_ms": {"type": "number"}},
        "required": ["cmd"], "additionalProperties": False},
    "get_goal": {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
    "view_image": CODEX["view_image"],
}


def test_a_tool_command_sends_every_call_to_a_shell_with_that_command() -> None:
    codex = offered(list(CODEX_EXEC), CODEX_EXEC)
    assert {toolargs.choose_tool(codex, random.Random(s))[0] for s in range(50)} == {"get_goal"}  # by default
    assert {toolargs.choose_tool(codex, random.Random(s), runs=True)[0] for s in range(50)} == {"exec_command"}
    sleepy = "sleep 3; ls"
    for seed in range(50):
        args = toolargs.arguments_for("exec_command", CODEX_EXEC["exec_command"], random.Random(seed), command=sleepy)
        assert args["cmd"] == sleepy and not list(validator(CODEX_EXEC["exec_command"]).iter_errors(args)), args
        argv = toolargs.arguments_for("shell", CODEX["shell"], random.Random(seed), command=sleepy)
        assert argv["command"] == ["sh", "-c", sleepy], argv  # an argv runs it through the shell
    # No shell offered: the command changes nothing, the safest tool is still called, as it was.
    claude = offered(["Read", "Glob", "Edit"], CLAUDE_CODE)
    assert {toolargs.choose_tool(claude, random.Random(s), runs=True)[0] for s in range(50)} == {"Read", "Glob"}
    assert toolargs.arguments_for("Read", CLAUDE_CODE["Read"], random.Random(3), command=sleepy) == \
        toolargs.arguments_for("Read", CLAUDE_CODE["Read"], random.Random(3))


def test_the_engine_given_a_tool_command_calls_the_shell_on_the_wire() -> None:
    req = anthropic_request(CLAUDE_CODE)
    body = json.dumps(req).encode()
    plain = synth.plan("anthropic_messages", req, body, TIMING, tool_call_rate=1.0)
    assert plain.tool_calls[0].name != "Bash"  # harmless by default: a reader
    planned = synth.plan("anthropic_messages", req, body, TIMING, tool_call_rate=1.0, tool_command="sleep 3; ls")
    (call,) = planned.tool_calls
    assert call.name == "Bash" and json.loads("".join(call.fragments))["command"] == "sleep 3; ls"
