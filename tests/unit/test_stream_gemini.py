"""``sloopd.vendor.stream_gemini``: tokens from the Gemini CLI's stream-json and json output.

The fixtures are captured from the real CLI (@google/gemini-cli 0.61.0) run by
tests/integration/test_agent_gemini.py against the stand-in API, whose every answer
reports promptTokenCount 1800, candidatesTokenCount 220 and cachedContentTokenCount 300:
``gemini-stream-json.jsonl`` is a two-turn success (3600 / 440 / 600),
``gemini-stream-json-429.jsonl`` a per-minute quota failure (zeros), ``gemini-json.json``
the ``-o json`` document of a success on the host.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sloopd.vendor.stream_gemini import parse
from sloopd.vendor.usage import Usage

STREAMS = Path(__file__).parent / "streams"


def read_stream(name: str) -> tuple[Usage, list[str]]:
    usage = Usage()
    recognised = [line for line in (STREAMS / name).read_text().splitlines() if parse(line, usage)]
    return usage, recognised


def test_a_successful_stream_reports_the_result_stats() -> None:
    usage, recognised = read_stream("gemini-stream-json.jsonl")
    assert len(recognised) == 1
    assert json.loads(recognised[0])["type"] == "result"
    assert usage == Usage(input_tokens=3600, output_tokens=440, cached_tokens=600, cost_usd=None)
    assert usage.tokens == 4040  # Gemini's total_tokens


def test_a_failed_stream_reports_zeros() -> None:
    usage, recognised = read_stream("gemini-stream-json-429.jsonl")
    assert len(recognised) == 1
    assert json.loads(recognised[0])["status"] == "error"
    assert usage == Usage()


def test_the_json_document_compacted_on_one_line() -> None:
    document = json.loads((STREAMS / "gemini-json.json").read_text())
    usage = Usage()
    assert parse(json.dumps(document), usage)
    assert usage == Usage(input_tokens=3600, output_tokens=440, cached_tokens=600)
    # Pretty-printed, line by line, it is not read (nor misread).
    other = Usage()
    lines = (STREAMS / "gemini-json.json").read_text().splitlines()
    assert not any(parse(line, other) for line in lines)
    assert other == Usage()


def test_models_are_summed_and_totals_used_without_them() -> None:
    usage = Usage()
    line = json.dumps(
        {
            "type": "result",
            "status": "success",
            "stats": {
                "input_tokens": 999,
                "models": {
                    "gemini-2.5-pro": {"input_tokens": 100, "output_tokens": 10, "cached": 5},
                    "gemini-2.5-flash": {"input_tokens": 50, "output_tokens": 4, "cached": 0},
                },
            },
        }
    )
    assert parse(line, usage)
    assert usage == Usage(input_tokens=150, output_tokens=14, cached_tokens=5)
    totals = Usage()
    line = '{"type":"result","stats":{"input_tokens":7,"output_tokens":3,"cached":1}}'
    assert parse(line, totals)
    assert totals == Usage(input_tokens=7, output_tokens=3, cached_tokens=1)
    assert parse(line, totals)  # a second execution's result adds up
    assert totals == Usage(input_tokens=14, output_tokens=6, cached_tokens=2)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Created and committed hello.txt.",
        '{"type":"init","session_id":"x","model":"gemini-2.5-pro"}',
        '{"type":"message","role":"assistant","content":"\\"stats\\": 1"}',
        '{"type":"tool_result","stats":{"input_tokens":5}}',
        '{"type":"result","stats":{"duration_ms":3}}',
        '{"type":"result","stats":[1,2]}',
        '{"type":"result","stats":{"models":{"m":{"tokens":{"prompt":4}}}}}',
        '["stats"]',
        '{"stats": {"models": 3}}',
        '{"type":"result","stats":' + "[" * 5000 + "]" * 5000 + "}",
        "{" + '"stats"' + " " * (2 << 20) + "}",
    ],
)
def test_lines_that_are_not_stats(line: str) -> None:
    usage = Usage()
    assert not parse(line, usage)
    assert usage == Usage()


def test_odd_counts_count_zero() -> None:
    usage = Usage()
    line = (
        '{"type":"result","stats":{"input_tokens":-5,"output_tokens":true,'
        '"cached":"600","models":{}}}'
    )
    assert parse(line, usage)
    assert usage == Usage()


@given(st.text(max_size=300))
def test_never_raises(line: str) -> None:
    usage = Usage()
    parse(line, usage)
    parse('{"type":"result","stats":' + line + "}", usage)
    assert usage.cost_usd is None
