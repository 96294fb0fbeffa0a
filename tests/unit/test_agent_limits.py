"""Issue 14 settings and their pure parts: timeouts, streams, budgets, retries, usage."""

from __future__ import annotations

from typing import Any

import pytest

from sloopd.core import config
from sloopd.flows.flow import Budget, Flow, FlowError, parse
from sloopd.runs.budget import over
from sloopd.runs.retries import backoff_ms
from sloopd.vendor import usage
from sloopd.vendor.usage import Usage
from tests.support import usage_stream

AGENT = {"name": "implement", "action": "agent"}
TEST = {"name": "test", "action": "command", "command": ["make", "test"]}
SYNC = {"name": "sync", "action": "sync"}


def refusal(agent: dict[str, Any], *stages: dict[str, Any], **flow: Any) -> str:
    with pytest.raises(FlowError) as caught:
        parse(agent, {"f": {"stages": list(stages) or [AGENT], **flow}})
    return str(caught.value)


def test_defaults() -> None:
    agent = parse({}, {}).agent
    assert (agent.agent_timeout_ms, agent.command_timeout_ms) == (2 * 3_600_000, 30 * 60_000)
    assert (agent.transient_retries, agent.transient_backoff_ms) == (3, 60_000)
    assert agent.transient_backoff_max_ms == 30 * 60_000
    # The default agent is the claude preset, which prints Claude Code's JSON events.
    assert agent.stream == "claude"
    assert agent.budget == Budget()


def test_agent_keys_parse() -> None:
    agent = parse(
        {
            "agent_timeout": "1h",
            "command_timeout": "10m",
            "transient_retries": 0,
            "transient_backoff": "30s",
            "transient_backoff_max": "5m",
            "stream": "codex",
            "max_cost_usd": 2,
            "max_tokens": 50_000,
        },
        {},
    ).agent
    assert (agent.agent_timeout_ms, agent.command_timeout_ms) == (3_600_000, 600_000)
    assert (agent.transient_retries, agent.transient_backoff_ms) == (0, 30_000)
    assert agent.stream == "codex"
    assert agent.budget == Budget(2.0, 50_000)


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        ({"agent_timeout": 30}, "'agent.agent_timeout' must be a duration string"),
        ({"command_timeout": "0s"}, "'agent.command_timeout' must be at least 1s"),
        ({"transient_retries": -1}, "'agent.transient_retries' must be an integer of at least 0"),
        ({"transient_backoff": "2m", "transient_backoff_max": "1m"}, "must not be shorter"),
        ({"stream": "claud"}, "'agent.stream' must be one of claude | codex | gemini | none"),
        ({"stream": "python:nomodule"}, "'agent.stream' must be one of"),
        ({"max_cost_usd": 0}, "'agent.max_cost_usd' must be a positive number"),
        ({"max_tokens": True}, "'agent.max_tokens' must be an integer of at least 1"),
    ],
)
def test_agent_refusals(agent: dict[str, Any], expected: str) -> None:
    assert expected in refusal(agent)


def test_stage_timeout_and_stream() -> None:
    flow = parse(
        {},
        {
            "f": {
                "stages": [
                    {**AGENT, "timeout": "45m", "stream": "gemini"},
                    {**TEST, "timeout": "90s"},
                    SYNC,
                ]
            }
        },
    ).flows["f"]
    assert (flow.stages[0].timeout_ms, flow.stages[0].stream) == (45 * 60_000, "gemini")
    assert (flow.stages[1].timeout_ms, flow.stages[1].stream) == (90_000, None)
    assert flow.stages[2].timeout_ms is None
    # Snapshots round-trip; one taken before 0.6.0 has no timeout and no stream.
    assert Flow.from_json(flow.to_json()) == flow
    old = flow.to_json()
    for stage in old["stages"]:
        del stage["timeout_ms"], stage["stream"]
    del old["max_cost_usd"], old["max_tokens"]
    assert Flow.from_json(old).stages[0].timeout_ms is None


def test_stage_refusals() -> None:
    assert "'flows.f.stages[0].timeout' is only for agent and command stages" in refusal(
        {}, {**SYNC, "timeout": "1m"}
    )
    assert "'flows.f.stages[0].stream' is only for agent stages" in refusal(
        {}, {**TEST, "stream": "claude"}
    )
    assert "'flows.f.stages[0].timeout' must be at least 1s" in refusal(
        {}, {**AGENT, "timeout": "500ms"}
    )


def test_reviewer_stream_and_flow_budget() -> None:
    panel = {
        **AGENT,
        "result_check": "panel",
        "reviewers": [
            {"target": "a", "command": ["a"], "stream": "codex"},
            {"target": "b", "command": ["b"]},
        ],
    }
    flows = parse({"max_tokens": 100}, {"f": {"stages": [panel], "max_cost_usd": 1.5}})
    flow = flows.flows["f"]
    assert [r.stream for r in flow.stages[0].reviewers] == ["codex", None]
    # The flow's figure wins; the other falls back to [agent]'s.
    assert flow.budget(flows.agent) == Budget(1.5, 100)
    assert Flow.from_json(flow.to_json()) == flow
    assert "'flows.f.max_tokens' must be an integer" in refusal({}, max_tokens="many")


def test_config_refuses_a_stream_without_a_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(usage.STREAM_MODULES, "gemini", "sloopd.vendor.no_such_module")
    monkeypatch.delitem(usage.PARSERS, "gemini", raising=False)
    with pytest.raises(config.ConfigError, match=r"'agent\.stream': stream 'gemini': cannot"):
        config.parse({"agent": {"stream": "gemini"}})
    spec = "python:tests.support.usage_stream:nothing"
    with pytest.raises(config.ConfigError, match="has no function 'nothing'"):
        config.parse({"agent": {"stream": spec}})


def test_registry_resolves_python_specs_and_registered_parsers() -> None:
    assert usage.parser("none") is None
    assert usage.parser(usage_stream.SPEC) is usage_stream.parse
    assert usage.PARSERS[usage_stream.SPEC] is usage_stream.parse
    usage.register("test-only", usage_stream.parse)
    assert usage.parser("test-only") is usage_stream.parse
    with pytest.raises(usage.UnknownStream):
        usage.parser("nobody")
    assert usage.metric_vendor(usage_stream.SPEC) == "custom"
    assert usage.metric_vendor("claude") == "claude"


def test_usage_sums_and_rows() -> None:
    assert usage.total([None, None]) is None
    summed = usage.total([Usage(1, 2, 3, None), None, Usage(10, 20, 0, 0.5)])
    assert summed == Usage(11, 22, 3, 0.5)
    assert usage.from_row(summed.row() if summed else None) == summed
    assert usage.from_row({"input_tokens": "x"}) is None
    assert usage.from_row(None) is None


def test_budget_names_the_figure() -> None:
    assert over(Budget(max_tokens=10_000), Usage(9000, 1000)) is None
    assert over(Budget(max_tokens=10_000), Usage(11_000, 1000)) == (
        "used 12000 tokens, over max_tokens 10000"
    )
    assert over(Budget(max_cost_usd=1.0), Usage(cost_usd=None)) is None
    assert over(Budget(max_cost_usd=1.0), Usage(cost_usd=1.25)) == (
        "used $1.2500, over max_cost_usd 1"
    )


def test_backoff_doubles_and_is_capped() -> None:
    agent = parse({"transient_backoff": "1m", "transient_backoff_max": "5m"}, {}).agent
    assert [backoff_ms(agent, used) for used in range(5)] == [
        60_000,
        120_000,
        240_000,
        300_000,
        300_000,
    ]
    assert backoff_ms(agent, 10_000) == 300_000
