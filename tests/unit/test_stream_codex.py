"""``sloopd.vendor.stream_codex``: usage from ``codex exec --json``, on captured streams.

The streams under ``tests/unit/streams/`` are the real Codex CLI 0.171.0's standard
output against the stand-in API (tests/support/standins/openai.py), whose every
response reports 1500 input, 250 output and 200 cached tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sloopd.vendor.stream_codex import parse
from sloopd.vendor.usage import Usage

STREAMS = Path(__file__).parent / "streams"


def read(name: str) -> Usage:
    usage = Usage()
    for line in (STREAMS / name).read_text(encoding="utf-8").splitlines():
        parse(line, usage)
    return usage


def test_a_turn_of_two_requests() -> None:
    usage = read("codex-hello.jsonl")
    assert usage.row() == {
        "input_tokens": 3000,
        "output_tokens": 500,
        "cached_tokens": 400,
        "cost_usd": None,
    }
    assert usage.tokens == 3500


def test_only_turn_completed_is_recognised() -> None:
    lines = (STREAMS / "codex-hello.jsonl").read_text(encoding="utf-8").splitlines()
    usage = Usage()
    seen = [json.loads(line)["type"] for line in lines if parse(line, usage)]
    assert seen == ["turn.completed"]


def test_a_failed_turn_reports_nothing() -> None:
    assert read("codex-rate-limited.jsonl") == Usage()


def test_turns_add_up() -> None:
    line = (
        '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,'
        '"output_tokens":3,"reasoning_output_tokens":1}}'
    )
    usage = Usage()
    assert parse(line, usage)
    assert parse(line, usage)
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (20, 6, 8)
    assert usage.cost_usd is None


@pytest.mark.parametrize(
    "line",
    [
        "",
        "turn.completed",
        "not json {",
        '{"type":"turn.completed"',
        '["turn.completed"]',
        '{"type":"turn.started"}',
        '{"type":"item.completed","item":{"type":"agent_message","text":"\\"turn.completed\\""}}',
        '{"type":"turn.completed"}',
        '{"type":"turn.completed","usage":null}',
        '{"type":"turn.completed","usage":[1,2]}',
    ],
)
def test_other_lines_change_nothing(line: str) -> None:
    usage = Usage()
    assert parse(line, usage) is False
    assert usage == Usage()


def test_odd_counts_count_as_zero() -> None:
    line = (
        '{"type":"turn.completed","usage":{"input_tokens":"5","cached_input_tokens":-1,'
        '"output_tokens":true}}'
    )
    usage = Usage()
    assert parse(line, usage) is True
    assert usage == Usage()
