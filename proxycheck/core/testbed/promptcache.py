"""The reference engine's prompt cache: Anthropic's `cache_control` breakpoints and the cache
usage fields they produce (`cache_creation_input_tokens`, `cache_read_input_tokens`,
`cache_creation.ephemeral_5m_input_tokens` / `ephemeral_1h_input_tokens`).

Nothing is really cached (the answer does not depend on it); the engine only keeps the digests of
the prompt prefixes it has "written", so usage reads as a real server's would. The rule:

- The prompt is a sequence of blocks in the API's cache order: the tools, then the system
  prompt's blocks, then each message's content blocks. A block carrying `cache_control` is a
  breakpoint; a prefix's digest covers its blocks without their `cache_control` members (a
  client moves its breakpoints from turn to turn, the content stays) and the model's name.
- A request without breakpoints neither reads nor writes: all its tokens are `input_tokens`.
- Otherwise it reads the longest prefix, ending at any block boundary up to its last breakpoint,
  that the engine has written before (so turn 2 of a conversation reads what turn 1 wrote), and
  writes from there to its last breakpoint; every breakpoint's prefix is then written. The
  written tokens count as 1h when the breakpoint that ends them asks for `"ttl": "1h"`, else 5m.
- Tokens are the engine's estimate (about four characters of canonical JSON a token); the
  encoder fits them into the request's own input estimate, so the three counts always sum to it.

The store is bounded (least recently used prefixes go first). The same request can thus read
more on a second sending than on its first, as with a real cache; replays stay comparable
because the normalized prompt tokens (the sum) do not change.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping

from proxycheck.core.protocol.requestparts import canonical_json

STORE_SIZE = 4096  # prefix digests kept per engine


@dataclass(frozen=True, slots=True)
class CacheUse:
    """What one request read from and wrote to the prompt cache, in (estimated) tokens."""

    read: int = 0
    written_5m: int = 0
    written_1h: int = 0

    @property
    def written(self) -> int:
        return self.written_5m + self.written_1h


NO_CACHE = CacheUse()


@dataclass(frozen=True, slots=True)
class _Block:
    digest: str  # of the prefix ending with this block
    tokens: int  # of the prefix ending with this block
    ttl: str | None  # the block's cache_control ttl ("5m" default); None: not a breakpoint


def blocks_of(req: Mapping[str, Any]) -> list[_Block]:
    """The request's prompt as cumulative prefixes, one per block, in cache order."""
    raw: list[tuple[str, Any]] = []  # (where the block is: "tools", "system" or a role, the block)
    tools = req.get("tools")
    if isinstance(tools, list):
        raw.extend(("tools", tool) for tool in tools)
    system = req.get("system")
    if isinstance(system, list):
        raw.extend(("system", block) for block in system)
    elif system is not None:
        raw.append(("system", system))
    messages = req.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, Mapping):
            raw.append(("", message))
            continue
        role, content = str(message.get("role")), message.get("content")
        if isinstance(content, list) and content:
            raw.extend((role, block) for block in content)
        else:
            raw.append((role, content))
    model = req.get("model")
    running = hashlib.sha256(f"model={model if isinstance(model, str) else ''};".encode())
    total = 0
    out = []
    for where, block in raw:
        ttl = None
        if isinstance(block, Mapping) and isinstance(block.get("cache_control"), Mapping):
            ttl = "1h" if block["cache_control"].get("ttl") == "1h" else "5m"
            block = {k: v for k, v in block.items() if k != "cache_control"}
        data = canonical_json([where, block])
        running.update(hashlib.sha256(data).digest())
        total += len(data) // 4
        out.append(_Block(running.copy().hexdigest(), total, ttl))
    return out


class PromptCache:
    """The prefixes an engine has written, bounded; `use` applies the rule of the module doc."""

    def __init__(self, size: int = STORE_SIZE) -> None:
        self.size = size
        self._written: OrderedDict[str, None] = OrderedDict()

    def use(self, req: Mapping[str, Any]) -> CacheUse:
        """What `req` reads and writes, and remember what it wrote. Never raises for a body of
        an unexpected shape: such parts are simply blocks without breakpoints."""
        try:
            blocks = blocks_of(req)
        except (RecursionError, ValueError, TypeError):
            return NO_CACHE
        breaks = [i for i, b in enumerate(blocks) if b.ttl is not None]
        if not breaks:
            return NO_CACHE
        last = breaks[-1]
        hit = next((i for i in range(last, -1, -1) if blocks[i].digest in self._written), None)
        read = blocks[hit].tokens if hit is not None else 0
        written = {"5m": 0, "1h": 0}
        start, start_tokens = (hit if hit is not None else -1), read
        for i in breaks:
            if i > start:
                written[blocks[i].ttl or "5m"] += blocks[i].tokens - start_tokens
                start, start_tokens = i, blocks[i].tokens
        for i in breaks + ([hit] if hit is not None else []):
            self._remember(blocks[i].digest)
        return CacheUse(read, written["5m"], written["1h"])

    def _remember(self, digest: str) -> None:
        self._written[digest] = None
        self._written.move_to_end(digest)
        while len(self._written) > self.size:
            self._written.popitem(last=False)


def fitted(use: CacheUse, prompt_tokens: int) -> tuple[int, int, int, int]:
    """(input, read, written 5m, written 1h) tokens summing to `prompt_tokens`: the cache's
    estimates, scaled down when they exceed the engine's estimate of the whole input."""
    total = use.read + use.written
    if total <= prompt_tokens:
        return prompt_tokens - total, use.read, use.written_5m, use.written_1h
    scale = prompt_tokens / total
    read, w5, w1 = int(use.read * scale), int(use.written_5m * scale), int(use.written_1h * scale)
    return prompt_tokens - read - w5 - w1, read, w5, w1
