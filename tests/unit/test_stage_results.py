"""``StageResult.to_row``: the stage_finished row keeps the keys it always had.

Each case is a result dict as the executor, the driver or recovery built it before
the result was one value, beside the ``StageResult`` that now stands for it: the
stored row has the same keys and values (an optional key stays absent rather than
null), so every stored log replays and every query reads it as before.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sloopd.flows.results import StageResult, daemon_diagnosis

USAGE = {"input_tokens": 3, "output_tokens": 4, "cached_tokens": 0, "cost_usd": None}
LEFT = {"reviewer": 0, "commit": "def", "paths": ["a.py"]}
TIMED = daemon_diagnosis("timed_out", "seat 0 (a) ran longer")

CASES: list[tuple[str, StageResult, dict[str, Any]]] = [
    (
        "interrupted",
        StageResult.interrupted("interrupted before it finished"),
        # 0.9.0: the row says why it ended undecided (``ended_by``, additive).
        {"passed": False, "reason": "interrupted before it finished", "ended_by": "interrupted"},
    ),
    (
        "git refused",
        StageResult.checked("git", False, "no such ref"),
        {"passed": False, "exit_code": None, "verdict_source": "git", "reason": "no such ref"},
    ),
    (
        "sync conflict",
        StageResult.checked("git", False, "conflict").but(paths=("a", "b"), final=True),
        {
            "passed": False,
            "exit_code": None,
            "verdict_source": "git",
            "reason": "conflict",
            "paths": ["a", "b"],
            "final": True,
        },
    ),
    (
        "merged",
        StageResult.checked("git", True, None).but(commit="abc"),
        {
            "passed": True,
            "exit_code": None,
            "verdict_source": "git",
            "reason": None,
            "commit": "abc",
        },
    ),
    (
        "exit code",
        StageResult.checked("exit_code", True, None, 0).but(usage=USAGE, commit="abc"),
        {
            "exit_code": 0,
            "passed": True,
            "verdict_source": "exit_code",
            "reason": None,
            "usage": USAGE,
            "commit": "abc",
        },
    ),
    (
        "spawn refused",
        StageResult.checked("exit_code", False, "no such command"),
        {
            "passed": False,
            "exit_code": None,
            "verdict_source": "exit_code",
            "reason": "no such command",
        },
    ),
    (
        "reported, no confidence",
        StageResult(passed=True, exit_code=0, verdict_source="reported", reason="ok"),
        {
            "exit_code": 0,
            "passed": True,
            "verdict_source": "reported",
            "reason": "ok",
            "confidence": None,
        },
    ),
    (
        "reviewer with leftovers",
        StageResult(
            passed=False,
            exit_code=0,
            verdict_source="missing",
            reason="no verdict was reported before the worker exited",
            commit="abc",
            discarded=(LEFT,),
        ),
        {
            "exit_code": 0,
            "passed": False,
            "verdict_source": "missing",
            "reason": "no verdict was reported before the worker exited",
            "commit": "abc",
            "discarded": [LEFT],
        },
    ),
    (
        "uncommitted",
        StageResult.checked("exit_code", False, "the agent left uncommitted changes", 0).but(
            paths=("x.py",), commit="abc"
        ),
        {
            "exit_code": 0,
            "passed": False,
            "verdict_source": "exit_code",
            "reason": "the agent left uncommitted changes",
            "paths": ["x.py"],
            "commit": "abc",
        },
    ),
    (
        "panel timed out",
        StageResult(
            passed=False,
            exit_code=None,
            verdict_source="panel",
            reason="0 of 1 reviewers passed (quorum 1)",
            commit="abc",
            discarded=(LEFT,),
            usage=USAGE,
            diagnosis=TIMED,
        ),
        {
            "passed": False,
            "exit_code": None,
            "verdict_source": "panel",
            "reason": "0 of 1 reviewers passed (quorum 1)",
            "commit": "abc",
            "discarded": [LEFT],
            "usage": USAGE,
            "diagnosis": TIMED,
        },
    ),
    (
        "recovery undetermined",
        StageResult(
            passed=False,
            exit_code=None,
            verdict_source="git",
            commit="abc",
            reason="git cannot tell",
            undetermined=True,
        ),
        {
            "exit_code": None,
            "verdict_source": "git",
            "commit": "abc",
            "passed": False,
            "reason": "git cannot tell",
            "undetermined": True,
        },
    ),
    (
        "budget spent",
        StageResult.checked("exit_code", True, None, 0).but(
            passed=False,
            reason="used 9 tokens",
            diagnosis=daemon_diagnosis("budget_exceeded", "used 9 tokens"),
            final=True,
        ),
        {
            "exit_code": 0,
            "passed": False,
            "verdict_source": "exit_code",
            "reason": "used 9 tokens",
            "diagnosis": {
                "classification": "budget_exceeded",
                "evidence": None,
                "vendor": None,
                "reset_at_ms": None,
                "detail": "used 9 tokens",
            },
            "final": True,
        },
    ),
]


@pytest.mark.parametrize(("case", "result", "before"), CASES, ids=[c[0] for c in CASES])
def test_the_row_has_the_keys_it_had(
    case: str, result: StageResult, before: dict[str, Any]
) -> None:
    row = orjson.loads(orjson.dumps(result.to_row()))
    assert row == before


def test_a_daemon_diagnosis_keeps_its_key_order() -> None:
    # Stored in the run's row and sent as is: the order is part of the wire text.
    assert orjson.dumps(daemon_diagnosis("stalled", "no output")) == (
        b'{"classification":"stalled","evidence":null,"vendor":null,'
        b'"reset_at_ms":null,"detail":"no output"}'
    )
