"""What a classified agent failure says, and whether it is retried (issue 24, items 5 and 7;
issue 34, items 7 and 9: a Gemini session that failed though its CLI exited 0, and the
preset's own refusal quoted as the reason).

Pure functions over a stage, its result and its diagnosis (sloopd.flows.diagnosed),
and the load-time warning for a preset stage with ``network = false``
(sloopd.flows.uses), pinned case by case.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from sloopd.core import config
from sloopd.flows.diagnosed import OFFLINE_DETAIL, diagnosed, failed_session, is_transient
from sloopd.flows.flow import Stage, parse
from sloopd.flows.results import StageResult, daemon_diagnosis
from sloopd.flows.uses import offline_warnings, preset_uses
from sloopd.runs import stop as stops
from sloopd.vendor import classify
from tests.support.vendor_outputs import GEMINI_NO_FINISH

ONLINE = Stage("implement", "agent")
OFFLINE = replace(ONLINE, network=False)
ADVISORY = replace(ONLINE, fail_action="continue")
FAILED = StageResult.checked("exit_code", False, "exited with code 1", 1)


def vendor(classification: str, evidence: str | None, who: str | None) -> dict[str, Any]:
    return {
        "classification": classification,
        "evidence": evidence,
        "vendor": who,
        "reset_at_ms": None,
    }


NO_KEY = "Missing environment variable: `OPENAI_API_KEY`."
# The gemini preset's refusal (sloopd.flows.presets.GEMINI_REFUSAL), printed on stderr, exit 2.
NOT_STARTING = (
    "sloop: not starting Gemini CLI: the checkout holds .env, which Gemini CLI obeys in a "
    "trusted folder (hooks, MCP servers, tool discovery commands, environment variables) and "
    "cannot ignore while its tools are on; see docs/security.md"
)
REFUSED = "API Error: Unable to connect to API (ECONNREFUSED)"

DIAGNOSED = [
    # (stage, diagnosis, the reason recorded, final)
    (ONLINE, vendor("unknown", None, None), "exited with code 1", False),
    (
        ONLINE,
        vendor("unknown", "The frobnicator declined", "gemini"),
        "exited with code 1; gemini said: The frobnicator declined",
        False,
    ),
    (
        ONLINE,
        vendor("auth_failed", NO_KEY, "codex"),
        f"exited with code 1; codex said: {NO_KEY}",
        False,
    ),
    (
        ONLINE,
        vendor("overloaded", "server is overloaded", None),
        "exited with code 1; the agent said: server is overloaded",
        False,
    ),
    (
        ONLINE,
        vendor("network", REFUSED, "claude"),
        f"exited with code 1; claude said: {REFUSED}",
        False,
    ),
    (
        OFFLINE,
        vendor("network", REFUSED, "claude"),
        f"exited with code 1; claude said: {REFUSED}; {OFFLINE_DETAIL}",
        True,
    ),
    # network = false explains only a network failure.
    (
        OFFLINE,
        vendor("auth_failed", NO_KEY, "codex"),
        f"exited with code 1; codex said: {NO_KEY}",
        False,
    ),
    (OFFLINE, vendor("network", None, None), f"exited with code 1; {OFFLINE_DETAIL}", True),
    # Sloop's own refusal is the reason itself: no agent said it.
    (ONLINE, vendor("refused", NOT_STARTING, None), NOT_STARTING, False),
]


@pytest.mark.parametrize(("stage", "diagnosis", "reason", "final"), DIAGNOSED)
def test_the_reason_quotes_the_cli_and_names_network_false(
    stage: Stage, diagnosis: dict[str, Any], reason: str, final: bool
) -> None:
    result = diagnosed(FAILED, stage, diagnosis)
    assert result.reason == reason
    assert result.final is final
    assert result.passed is False
    assert result.diagnosis is not None
    assert result.diagnosis["classification"] == diagnosis["classification"]
    assert result.diagnosis.get("detail") == (OFFLINE_DETAIL if final else None)


def test_judged_hands_the_classification_to_diagnosed() -> None:
    judged = stops.judged(FAILED, None, OFFLINE, lambda: vendor("network", REFUSED, "claude"))
    assert judged == diagnosed(FAILED, OFFLINE, vendor("network", REFUSED, "claude"))
    assert judged.final is True


TRANSIENT = [
    (ONLINE, vendor("network", REFUSED, "claude"), True),
    (ONLINE, vendor("overloaded", None, None), True),
    (OFFLINE, vendor("overloaded", None, None), True),
    (OFFLINE, vendor("network", REFUSED, "claude"), False),  # its own network = false
    (ADVISORY, vendor("network", REFUSED, "claude"), False),  # the walk goes on past it
    (ONLINE, vendor("auth_failed", NO_KEY, "codex"), False),
    (ONLINE, daemon_diagnosis("stalled", "no output"), False),
    (ONLINE, vendor("refused", NOT_STARTING, None), False),  # the same checkout, the same no
    (ONLINE, None, False),
]


@pytest.mark.parametrize(("stage", "diagnosis", "transient"), TRANSIENT)
def test_what_is_queued_again_as_transient(
    stage: Stage, diagnosis: dict[str, Any] | None, transient: bool
) -> None:
    assert is_transient(stage, diagnosis) is transient


PASSED = StageResult.checked("exit_code", True, None, 0)
REPORTED_PASS = StageResult(passed=True, exit_code=0, verdict_source="reported", reason="ok")
FAILED_SESSION = PASSED.failed(
    'exited with code 0, but the CLI\'s stream ends in a result of status "error"'
)
SESSIONS = [
    # (result by the exit status, the stage's stream, its output, the result it becomes)
    (PASSED, "gemini", GEMINI_NO_FINISH, FAILED_SESSION),
    (PASSED, "gemini", GEMINI_NO_FINISH[:3], PASSED),  # no verdict in the stream: exit 0 holds
    (PASSED, "claude", GEMINI_NO_FINISH, PASSED),  # its CLI exits non-zero when it fails
    (PASSED, "none", GEMINI_NO_FINISH, PASSED),
    (FAILED, "gemini", GEMINI_NO_FINISH, FAILED),  # failed already: the exit status says so
    (REPORTED_PASS, "gemini", GEMINI_NO_FINISH, REPORTED_PASS),  # the verdict decides
]


@pytest.mark.parametrize(("result", "stream", "output", "expected"), SESSIONS)
def test_a_session_its_stream_says_failed_does_not_pass(
    result: StageResult, stream: str, output: list[str], expected: StageResult
) -> None:
    assert failed_session(result, stream, output) == expected


def test_a_failed_session_is_classified_from_its_error_event_and_queued_again() -> None:
    result = failed_session(PASSED, "gemini", GEMINI_NO_FINISH)
    judged = stops.judged(result, None, ONLINE, lambda: classify(GEMINI_NO_FINISH, 0).as_json())
    assert judged.passed is False
    assert judged.reason == (
        'exited with code 0, but the CLI\'s stream ends in a result of status "error"; '
        "gemini said: Model stream ended without a finish reason."
    )
    assert judged.diagnosis is not None
    assert judged.diagnosis["classification"] == "overloaded"
    assert is_transient(ONLINE, judged.diagnosis) is True


def flows(stages: list[dict[str, Any]], agent: dict[str, Any] | None = None) -> Any:
    return parse(agent or {}, {"default": {"stages": stages}})


def test_each_way_of_choosing_a_preset_is_found_with_its_network() -> None:
    parsed = flows(
        [
            {"name": "implement", "action": "agent", "network": False},
            {"name": "fix", "action": "agent", "agent": "gemini"},
            {"name": "test", "action": "command", "command": ["make"], "network": False},
            {
                "name": "review",
                "action": "agent",
                "result_check": "panel",
                "network": False,
                "reviewers": [
                    {"target": "a", "agent": "claude"},
                    {"target": "b", "command": ["sh", "mine.sh"]},
                    {"target": "c", "agent": "example"},
                ],
            },
        ],
        {"preset": "codex"},
    )
    uses = preset_uses(parsed.agent, parsed.flows.values())
    assert [(u.where, u.preset.name, u.network) for u in uses] == [
        ("flows.default.stages[0]", "codex", False),
        ("flows.default.stages[1]", "gemini", True),
        ("flows.default.stages[3].reviewers[0]", "claude", False),
        ("flows.default.stages[3].reviewers[2]", "example", False),
    ]
    warnings = offline_warnings(uses)
    assert len(warnings) == 2, warnings  # the example agent needs no vendor
    assert warnings[0].startswith("'flows.default.stages[0]' sets network = false")
    assert "the OpenAI Responses API" in warnings[0]
    assert "'claude' preset" in warnings[1]


def test_an_explicit_command_is_no_preset() -> None:
    parsed = flows(
        [{"name": "implement", "action": "agent", "network": False}],
        {"command": ["claude", "-p", "{prompt}"]},
    )
    assert preset_uses(parsed.agent, parsed.flows.values()) == []


def test_loading_warns_of_an_offline_preset_stage(caplog: pytest.LogCaptureFixture) -> None:
    document = {
        "flows": {
            "default": {"stages": [{"name": "implement", "action": "agent", "network": False}]}
        }
    }
    with caplog.at_level(logging.WARNING, logger="sloopd.flows.uses"):
        config.parse(document)
    said = [r.getMessage() for r in caplog.records if r.name == "sloopd.flows.uses"]
    assert len(said) == 1, said
    assert "'claude' preset" in said[0]
    assert "network = false" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sloopd.flows.uses"):
        config.parse({})  # the default flow has the network
    assert [r for r in caplog.records if r.name == "sloopd.flows.uses"] == []
