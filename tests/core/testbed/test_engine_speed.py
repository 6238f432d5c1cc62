"""How a real engine is started on a CPU and what the cases derive from its measured speed: the
CPU's facts read from /proc/cpuinfo's text, the dtype chosen by the CPU's bfloat16 math (never by
AVX-512 alone), and the prefill figures held against what vLLM was measured to do on an AVX2 EPYC."""

from __future__ import annotations

import pytest

from proxycheck.core.testbed.engine_speed import CpuFacts, EngineSpeed, cpu_facts, settings_for

EPYC = """processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC
flags		: fpu sse sse2 avx f16c avx2 bmi2 sha_ni vaes
bogomips	: 4890.81

processor	: 1
model name	: AMD EPYC
flags		: fpu sse sse2 avx f16c avx2 bmi2 sha_ni vaes avx512f
"""


def cpu(*flags: str, cpus: tuple[int, ...] = (0, 1)) -> CpuFacts:
    return CpuFacts("a CPU", cpus, frozenset(flags))


def test_cpuinfo_gives_the_model_and_the_first_processors_flags() -> None:
    facts = cpu_facts(EPYC, (0, 1))
    assert facts.model == "AMD EPYC" and facts.cpus == (0, 1)
    assert "avx2" in facts.flags and "avx512f" not in facts.flags  # the first processor's line only
    assert facts.describe() == "2 CPUs (AMD EPYC): avx2, no avx512f, no avx512_bf16, no amx_bf16, no amx_tile"
    assert cpu_facts("", (0,)).describe().startswith("1 CPUs (unknown model): no avx2")


@pytest.mark.parametrize(
    ("flags", "dtype"),
    [
        (("avx2",), "float32"),
        # AVX-512 without its bfloat16 instructions still emulates bfloat16 matmuls
        (("avx2", "avx512f"), "float32"),
        (("avx2", "avx512f", "avx512_bf16"), "bfloat16"),
        (("avx2", "avx512f", "amx_tile", "amx_bf16"), "bfloat16"),
        # a tile unit alone is no bfloat16 math
        (("avx2", "avx512f", "amx_tile"), "float32"),
    ],
)
def test_bfloat16_only_where_the_cpu_has_bfloat16_math(flags: tuple[str, ...], dtype: str) -> None:
    assert settings_for(cpu(*flags)).dtype == dtype


def test_compute_threads_are_bound_to_as_many_cpus_as_asked_the_last_ones() -> None:
    four = cpu("avx2", cpus=(2, 3, 5, 7))
    assert settings_for(four).bind == (2, 3, 5, 7)
    assert settings_for(four, 1).bind == (7,)
    assert settings_for(four, 2).bind == (5, 7)
    assert settings_for(four, 0).bind == (7,)  # at least one
    assert settings_for(four, 9).bind == (2, 3, 5, 7)  # no more than there are
    assert settings_for(four, 2).describe() == "--dtype float32, compute threads on CPUs 5,7"
    assert settings_for(four, 1).describe() == "--dtype float32, compute threads on CPU 7"


# vLLM 0.32 on an AVX2 EPYC, float32 on both cores, nothing beside it: first token after 40, 978 and
# 4,270 tokens in 0.20, 2.92 and 24.23 s; 12.7 tokens/s; the 978 tokens were 265 pasted words and a
# short question.
MEASURED = EngineSpeed(first_token=0.20, per_token=1 / 12.7, short_tokens=40, long_first_token=2.92,
                       long_tokens=978, long_words=265)  # fmt: skip


def test_the_line_through_two_measurements_bounds_a_longer_prefill_from_both_sides() -> None:
    assert MEASURED.first_token_after(978) == pytest.approx(2.92)
    assert MEASURED.first_token_after(40) == pytest.approx(0.20)
    # 4,270 tokens took 24.23 s: the line says less (attention is quadratic), the bound more
    assert MEASURED.first_token_after(4270) < 24.23 < MEASURED.first_token_at_most(4270)
    # below the longer measurement the line is already the bound
    assert MEASURED.first_token_at_most(500) == MEASURED.first_token_after(500)
    assert MEASURED.prefill_per_token * 1000 == pytest.approx(2.90, abs=0.01)


def test_words_for_a_prefill_are_those_the_measurement_needed_for_it() -> None:
    assert MEASURED.tokens_per_word == pytest.approx(938 / 265)
    # the measured long prompt's extra prefill is what its 265 words took
    assert MEASURED.words_for(2.92 - 0.20) == pytest.approx(265, abs=1)
    # twice the time, twice the words (at least: the line is a lower bound above it)
    assert MEASURED.words_for(2 * (2.92 - 0.20)) == pytest.approx(530, abs=1)
    assert MEASURED.tokens_of(265) == 938
    assert MEASURED.words_for(0) == 1


def test_a_measured_zero_or_an_engine_faster_than_its_clock_derives_no_zero() -> None:
    instant = EngineSpeed(first_token=0.0, per_token=0.0, short_tokens=40, long_first_token=0.0, long_tokens=40,
                          long_words=0)  # fmt: skip
    assert instant.prefill_per_token > 0 and instant.tokens_per_word > 0
    assert instant.first_token_after(1000) > 0
    assert instant.words_for(1.0) >= 1
    assert "tokens/s" in instant.describe()


def test_an_answer_is_bounded_by_its_prefill_and_its_decoded_tokens() -> None:
    assert MEASURED.answer_at_most(978, 127) == pytest.approx(2.92 + 10.0)
    assert MEASURED.describe() == ("first token 0.20 s after 40 tokens, 2.92 s after 978; prefill 2.90 s per 1k "
                                   "tokens; 12.7 tokens/s on one stream; 3.5 tokens per pasted word")  # fmt: skip
