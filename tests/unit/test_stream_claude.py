"""Claude Code's stream-json parser, on streams captured from the real CLI.

The fixtures under ``tests/unit/streams/claude-*.jsonl`` are the standard output of
``claude -p --output-format stream-json --verbose`` 2.1.332 run by Sloop in its
sandbox against ``tests.support.standins.anthropic`` (see
tests/integration/test_agent_claude.py): every API call there reports 1200 input,
300 output and 100 cache-read tokens, and the successful sessions make two calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sloopd.core.model import UsageSum
from sloopd.vendor import stream_claude
from sloopd.vendor.usage import Usage, from_row, total

STREAMS = Path(__file__).parent / "streams"
FAILED = [
    "claude-auth.jsonl",
    "claude-connection-refused.jsonl",
    "claude-overloaded.jsonl",
    "claude-prompt-too-long.jsonl",
    "claude-rate-limit.jsonl",
]


def lines(name: str) -> list[str]:
    return (STREAMS / name).read_text(encoding="utf-8").splitlines()


def fed(name: str) -> tuple[Usage, int]:
    usage = Usage()
    hits = sum(stream_claude.parse(line, usage) for line in lines(name))
    return usage, hits


def test_a_successful_session_reports_its_totals() -> None:
    usage, hits = fed("claude-success.jsonl")
    assert hits == 1  # only the result event counts
    # Two calls of 1200 fresh + 100 cache-read input tokens, 300 output tokens.
    assert usage.input_tokens == 2 * (1200 + 100)
    assert usage.cached_tokens == 2 * 100
    assert usage.output_tokens == 2 * 300
    assert usage.tokens == 2600 + 600
    assert usage.cost_usd == pytest.approx(0.02164)


def test_the_result_sets_the_totals_rather_than_adding_to_them() -> None:
    usage = Usage(input_tokens=5, output_tokens=7, cached_tokens=1, cost_usd=9.0)
    result = lines("claude-success.jsonl")[-1]
    assert stream_claude.parse(result, usage)
    assert stream_claude.parse(result, usage)
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (2600, 600, 200)
    assert usage.cost_usd == pytest.approx(0.02164)


@pytest.mark.parametrize("name", FAILED)
def test_a_failed_session_reports_zero_and_an_error(name: str) -> None:
    usage, hits = fed(name)
    assert hits == 1
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (0, 0, 0)
    assert usage.cost_usd == 0.0  # reported, and zero: no call was answered
    assert stream_claude.is_error(lines(name)[-1]) is True


def test_permission_denials_name_the_refused_tools() -> None:
    stream = lines("claude-permission-denied.jsonl")
    found = [stream_claude.permission_denials(line) for line in stream]
    assert found[:-1] == [None] * (len(stream) - 1)
    assert found[-1] == ["Bash"]
    # The CLI still called it a success and the model's turns were paid for.
    assert stream_claude.is_error(stream[-1]) is False
    usage, _ = fed("claude-permission-denied.jsonl")
    assert usage.output_tokens == 600


def test_a_clean_session_has_no_denials() -> None:
    assert stream_claude.permission_denials(lines("claude-success.jsonl")[-1]) == []
    assert stream_claude.is_error(lines("claude-success.jsonl")[-1]) is False


@pytest.mark.parametrize(
    "line",
    [
        "",
        "not json",
        '{"type":"result"',
        "[1, 2]",
        '"result"',
        '{"type":"assistant","message":{"usage":{"input_tokens":5}},"result":1}',
        '{"type":"system","subtype":"init","result":"x"}',
        "{" + '"a":[' * 100_000 + "]" * 100_000 + ',"result":1}',
    ],
)
def test_other_lines_are_not_results(line: str) -> None:
    usage = Usage()
    assert stream_claude.parse(line, usage) is False
    assert usage == Usage()
    assert stream_claude.permission_denials(line) is None
    assert stream_claude.is_error(line) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"usage": "lots", "total_cost_usd": "free", "permission_denials": "none"},
        {"usage": {"input_tokens": True, "output_tokens": -3, "cache_read_input_tokens": 1e30}},
        {"usage": {"input_tokens": 10**20}, "total_cost_usd": float("nan")},
        {"usage": None, "total_cost_usd": -1, "permission_denials": [None, {"tool_name": 3}]},
    ],
)
def test_malformed_results_never_raise(fields: dict[str, object]) -> None:
    line = json.dumps({"type": "result", **fields})
    usage = Usage()
    assert stream_claude.parse(line, usage) is True
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (0, 0, 0)
    assert usage.cost_usd is None
    assert stream_claude.permission_denials(line) == []


def test_it_is_a_stream_parser() -> None:
    from sloopd.vendor.usage import StreamParser

    parser: StreamParser = stream_claude.parse
    assert parser(lines("claude-success.jsonl")[-1], Usage())


def test_cost_is_kept_to_a_millionth_where_it_is_summed() -> None:
    """``show`` printed ``usage.cost_usd 0.018480000000000003``: two stages' costs summed
    as floats.  Every sum (a run's stages, the dashboard's settled runs) is rounded."""
    stages = [Usage(10, 1, 0, 0.00013), Usage(10, 1, 0, 0.01835)]
    assert 0.00013 + 0.01835 != 0.01848  # the float sum shows its binary rounding
    summed = total(stages)
    assert summed is not None
    assert summed.row()["cost_usd"] == 0.01848
    assert UsageSum.of(u.row() for u in stages).row() == {
        "input_tokens": 20,
        "output_tokens": 2,
        "cached_tokens": 0,
        "cost_usd": 0.01848,
    }
    stored = from_row({**summed.row(), "cost_usd": 0.018480000000000003})
    assert stored is not None
    assert stored.row()["cost_usd"] == 0.01848
