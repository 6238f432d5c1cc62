"""What a real engine can do on the machine it runs on, and what the cases run on it derive from
that: the CPU's facts that decide how the engine is best started (`CpuFacts`, `settings_for`), the
engine's speed measured once it is ready (`EngineSpeed`), and the figures a case needs of it (how
many pasted words a prefill of some seconds takes, how long a client must wait for an answer).

A real engine on CPU is many times slower on one machine than on another (vLLM's bfloat16 on a CPU
without native bfloat16 math: 30 s for the first token of 1k tokens, against 1 s where it has it),
so nothing here holds a speed: every figure comes from a measurement of the engine a case got.
Pure: the measuring itself (HTTP requests to the engine) is `proxycheck.io.vllm`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The CPU flags (as /proc/cpuinfo spells them) that decide an engine's settings or explain its speed.
SHOWN_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


@dataclass(frozen=True)
class CpuFacts:
    """The processor an engine runs on: its model name, the CPUs this process may use, its flags."""

    model: str
    cpus: tuple[int, ...]
    flags: frozenset[str]

    @property
    def native_bf16(self) -> bool:
        """bfloat16 matrix math in hardware (AVX-512 BF16 or AMX). Without it, bfloat16 matmuls
        fall back to slow emulation (vLLM's oneDNN kernel cannot be built; measured 10x slower)."""
        return bool(self.flags & {"avx512_bf16", "amx_bf16"})

    def describe(self) -> str:
        """One line: "2 CPUs (AMD EPYC): avx2, no avx512f, no avx512_bf16, ..." """
        shown = ", ".join(flag if flag in self.flags else f"no {flag}" for flag in SHOWN_FLAGS)
        return f"{len(self.cpus)} CPUs ({self.model or 'unknown model'}): {shown}"


def cpu_facts(cpuinfo: str, cpus: tuple[int, ...]) -> CpuFacts:
    """`cpuinfo`: the text of /proc/cpuinfo (empty where there is none); `cpus`: those this
    process may run on. The flags are the first processor's (they are alike on every one)."""
    model, flags = "", frozenset[str]()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and not model:
            model = value.strip()
        elif name == "flags" and not flags:
            flags = frozenset(value.split())
    return CpuFacts(model, cpus, flags)


@dataclass(frozen=True)
class EngineSettings:
    """How vLLM's CPU build is started on a machine: its dtype and the CPUs its compute threads are
    bound to (one OpenMP thread a CPU)."""

    dtype: str
    bind: tuple[int, ...]

    def describe(self) -> str:
        cpus = "CPU" if len(self.bind) == 1 else "CPUs"
        return f"--dtype {self.dtype}, compute threads on {cpus} {','.join(map(str, self.bind))}"


def settings_for(cpu: CpuFacts, cores: int | None = None) -> EngineSettings:
    """The settings that make vLLM fast on `cpu`, its compute threads on `cores` CPUs (all of them
    when None; at least one), the last ones (the first are where other work tends to start).

    The model ships in bfloat16, which vLLM keeps on every x86 CPU; without native bfloat16 math its
    matmuls are emulated and float32 is 7-10x faster (measured on an AVX2 EPYC: first token of 1k
    tokens 2.9 s against 24 s on 2 cores, 30 s on one). vLLM's own thread binding leaves one of two
    CPUs idle ("core ids=[0]", "Reducing Torch threads from 2 to 1"), hence an explicit one.
    """
    count = len(cpu.cpus) if cores is None else max(1, min(cores, len(cpu.cpus)))
    return EngineSettings("bfloat16" if cpu.native_bf16 else "float32", cpu.cpus[len(cpu.cpus) - count:])


# A short prompt's first token is at least this (a request's own overhead): a measured zero would
# make every figure derived from it zero too.
MIN_SECONDS = 0.01


@dataclass(frozen=True)
class EngineSpeed:
    """An engine's speed as measured once it was ready, on one stream with nothing beside it:

    - `first_token`: seconds to the first token of a short prompt of `short_tokens` tokens;
    - `per_token`: seconds between decoded tokens;
    - `long_first_token`: seconds to the first token of `long_tokens` tokens (pasted words, no
      prefix cache), whose pasted part was `long_words` words ("line0 line1 ..." as the tests paste),
      where the short prompt pasted `short_words`.

    A prefill grows faster than its length (attention is quadratic): between and below the two
    measured sizes, the line through them is an upper bound; above them, a lower one.
    """

    first_token: float
    per_token: float
    short_tokens: int
    long_first_token: float
    long_tokens: int
    long_words: int
    short_words: int = 0

    @property
    def prefill_per_token(self) -> float:
        """Seconds a prompt token adds to the first token (the slope between the two measurements)."""
        extra = max(self.long_tokens - self.short_tokens, 1)
        return max(self.long_first_token - self.first_token, MIN_SECONDS) / extra

    @property
    def tokens_per_word(self) -> float:
        return max((self.long_tokens - self.short_tokens) / max(self.long_words - self.short_words, 1), 0.1)

    def first_token_after(self, tokens: int) -> float:
        """About how long the first token of a `tokens`-token prompt takes (no prefix cache): the line
        through the measurements, so at least this much for a prompt longer than `long_tokens`."""
        return max(self.first_token, MIN_SECONDS) + self.prefill_per_token * max(tokens - self.short_tokens, 0)

    def first_token_at_most(self, tokens: int) -> float:
        """An upper bound of the same: past `long_tokens`, the line scaled by how far past it is (a
        quadratic cost at most grows by the square of the length)."""
        return self.first_token_after(tokens) * max(1.0, tokens / max(self.long_tokens, 1))

    def words_for(self, seconds: float) -> int:
        """How many pasted words make a prefill of at least `seconds` beyond a short prompt's."""
        return max(1, math.ceil(seconds / self.prefill_per_token / self.tokens_per_word))

    def tokens_of(self, words: int) -> int:
        return math.ceil(words * self.tokens_per_word)

    def answer_at_most(self, tokens: int, max_tokens: int) -> float:
        """An upper bound of a whole answer's time: the prefill, then `max_tokens` decoded."""
        return self.first_token_at_most(tokens) + self.per_token * max_tokens

    def describe(self) -> str:
        """One line of the figures: first tokens at both sizes, prefill per 1k tokens, tokens/s."""
        return (f"first token {self.first_token:.2f} s after {self.short_tokens} tokens, "
                f"{self.long_first_token:.2f} s after {self.long_tokens}; prefill "
                f"{self.prefill_per_token * 1000:.2f} s per 1k tokens; {1 / max(self.per_token, 1e-6):.1f} tokens/s "
                f"on one stream; {self.tokens_per_word:.1f} tokens per pasted word")  # fmt: skip
