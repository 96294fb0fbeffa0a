"""Flows and the agent section of sloop.toml: ``sloopd.flow.parse`` and ``sloopd.config.load``.

Every refusal names the key (its full dotted path, with the stage's index)
and the reason (DESIGN "Files in the repository"); every default is the one
DESIGN gives.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sloopd.core import config
from sloopd.flows import presets
from sloopd.flows.flow import (
    DEFAULT_AGENT_COMMAND,
    Flow,
    FlowError,
    Reviewer,
    Stage,
    default_flow,
    parse,
)

AGENT = {"name": "implement", "action": "agent"}
SYNC = {"name": "sync", "action": "sync"}
MERGE = {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3}
REVIEWERS = [
    {"target": "claude", "command": ["claude", "-p", "{prompt}"]},
    {"target": "codex", "command": ["codex", "exec", "{prompt}"]},
]


def flow_of(*stages: dict[str, Any], name: str = "default") -> Flow:
    return parse({}, {name: {"stages": list(stages)}}).flows[name]


def refusal(
    *stages: dict[str, Any], agent: dict[str, Any] | None = None, name: str = "default"
) -> str:
    with pytest.raises(FlowError) as caught:
        parse(agent or {}, {name: {"stages": list(stages)}})
    return str(caught.value)


# --- refusals: key and reason ------------------------------------------------------


def test_unknown_stage_key() -> None:
    message = refusal(AGENT, {**SYNC, "colour": "red"})
    assert "unknown key" in message
    assert "'flows.default.stages[1].colour'" in message


def test_unknown_flow_key() -> None:
    with pytest.raises(FlowError, match=r"unknown key 'flows\.quick\.steps'"):
        parse({}, {"quick": {"stages": [AGENT], "steps": []}})


def test_unknown_agent_key() -> None:
    with pytest.raises(FlowError, match=r"unknown key 'agent\.model'"):
        parse({"model": "opus"}, {})


def test_unknown_return_to() -> None:
    message = refusal(AGENT, {**SYNC, "return_to": "lint"})
    assert "'flows.default.stages[1].return_to'" in message
    assert "'lint'" in message
    assert "unknown" in message


def test_return_to_pointing_forward() -> None:
    message = refusal({**AGENT, "return_to": "sync"}, SYNC)
    assert "'flows.default.stages[0].return_to'" in message
    assert "'sync'" in message
    assert "forward" in message


def test_return_to_itself_is_allowed() -> None:
    flow = flow_of(
        AGENT, {"name": "test", "action": "command", "command": ["t"], "return_to": "test"}
    )
    assert flow.stages[1].return_to == "test"
    assert flow.stages[1].returns == 1


def test_continue_with_return_to() -> None:
    message = refusal(
        AGENT,
        {
            "name": "lint",
            "action": "command",
            "command": ["lint"],
            "fail_action": "continue",
            "return_to": "implement",
        },
    )
    assert "'flows.default.stages[1]'" in message
    assert "continue" in message
    assert "return_to" in message


def test_panel_without_reviewers() -> None:
    reviewers: dict[str, Any]
    for reviewers in ({}, {"reviewers": []}):
        message = refusal({**AGENT, "result_check": "panel", **reviewers})
        assert "'flows.default.stages[0].reviewers'" in message
        assert "reviewer" in message


@pytest.mark.parametrize("quorum", [0, 3, -1, True, "2"])
def test_quorum_out_of_range(quorum: Any) -> None:
    message = refusal({**AGENT, "result_check": "panel", "reviewers": REVIEWERS, "quorum": quorum})
    assert "'flows.default.stages[0].quorum'" in message
    assert "between 1 and 2" in message


@pytest.mark.parametrize("key", ["quorum", "reviewers"])
def test_panel_keys_only_on_panels(key: str) -> None:
    value: Any = 1 if key == "quorum" else REVIEWERS
    message = refusal({**AGENT, key: value})
    assert f"'flows.default.stages[0].{key}'" in message
    assert "panel" in message


def test_panel_needs_an_agent_stage() -> None:
    message = refusal(
        AGENT,
        {"name": "review", "action": "command", "command": ["x"], "result_check": "panel"},
    )
    assert "'flows.default.stages[1].result_check'" in message
    assert "agent" in message


@pytest.mark.parametrize(
    ("reviewer", "key"),
    [
        ({"target": "claude"}, "reviewers[0].command"),
        ({"target": "", "command": ["c"]}, "reviewers[0].target"),
        ({"target": "claude", "command": ["c"], "model": "x"}, "reviewers[0]"),
        ("claude", "reviewers[0]"),
    ],
)
def test_bad_reviewer(reviewer: Any, key: str) -> None:
    message = refusal({**AGENT, "result_check": "panel", "reviewers": [reviewer]})
    assert f"'flows.default.stages[0].{key}" in message


def test_returns_without_return_to() -> None:
    message = refusal(AGENT, {**SYNC, "returns": 2})
    assert "'flows.default.stages[1].returns'" in message
    assert "return_to" in message


@pytest.mark.parametrize("returns", [0, -1, True, "2", 1.5])
def test_returns_must_be_a_positive_integer(returns: Any) -> None:
    message = refusal(AGENT, SYNC, {**MERGE, "returns": returns})
    assert "'flows.default.stages[2].returns'" in message
    assert "at least 1" in message


@pytest.mark.parametrize("key", ["stall_after", "stall_kill_after"])
@pytest.mark.parametrize("value", ["soon", "20", "-5m", "", 20])
def test_bad_duration(key: str, value: Any) -> None:
    with pytest.raises(FlowError) as caught:
        parse({key: value}, {})
    assert f"'agent.{key}'" in str(caught.value)


def test_stall_kill_before_stall() -> None:
    with pytest.raises(FlowError) as caught:
        parse({"stall_after": "2h", "stall_kill_after": "20m"}, {})
    message = str(caught.value)
    assert "'agent.stall_kill_after'" in message
    assert "'agent.stall_after'" in message


@pytest.mark.parametrize("command", [[], "claude -p", ["claude", ""], ["claude", 1]])
def test_agent_command_must_be_an_argv(command: Any) -> None:
    with pytest.raises(FlowError, match=r"'agent\.command'.*argv"):
        parse({"command": command}, {})


@pytest.mark.parametrize(
    ("stage", "key"),
    [
        ({"name": "x"}, "action"),
        ({"name": "x", "action": "shell"}, "action"),
        ({"name": "x", "action": "agent", "result_check": "vibes"}, "result_check"),
        ({"name": "x", "action": "agent", "fail_action": "retry"}, "fail_action"),
        ({"action": "agent"}, "name"),
        ({"name": "a#1", "action": "agent"}, "name"),
        ({"name": "x", "action": "command"}, "command"),
        ({"name": "x", "action": "sync", "command": ["git"]}, "command"),
        ({"name": "x", "action": "command", "command": ["t"], "prompt": "hi"}, "prompt"),
        ({"name": "x", "action": "agent", "prompt": 5}, "prompt"),
        ({"name": "x", "action": "sync", "result_check": "reported"}, "result_check"),
        ({"name": "x", "action": "ff_only", "result_check": "panel"}, "result_check"),
        ({"name": "x", "action": "agent", "mode": "rebase"}, "mode"),
        ({"name": "x", "action": "sync", "mode": "squash"}, "mode"),
    ],
)
def test_bad_stage_value_names_its_key(stage: dict[str, Any], key: str) -> None:
    assert f"'flows.default.stages[0].{key}'" in refusal(stage)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("unit/tests", "it contains '/'"),
        ("test#2", "it contains '#'"),
        ("unit tests", "it contains ' '"),
        (" test", "it starts with ' '"),
        ("test\n", "it contains '\\n'"),
        ("a..b", "it contains '..'"),
        ("review.lock", "it ends in '.lock'"),
        ("end.", "it ends in '.'"),
        ("", "it is empty"),
        ("-x", "it starts with '-'"),
    ],
)
def test_stage_names_that_break_refs_files_or_selectors_are_refused(name: str, why: str) -> None:
    message = refusal({"name": name, "action": "agent"})
    assert f"'flows.default.stages[0].name': the stage name {name!r} is refused: {why}" in message
    assert "(letters, digits, '.', '_' and '-'" in message  # the rule, named


def test_a_stage_name_must_be_a_string() -> None:
    assert "'flows.default.stages[0].name' is required" in refusal({"name": 3, "action": "agent"})


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("docs/fast", "it contains '/'"),
        ("a#b", "it contains '#'"),
        ("two words", "it contains ' '"),
    ],
)
def test_flow_names_that_break_refs_or_selectors_are_refused(name: str, why: str) -> None:
    message = refusal(AGENT, name=name)
    assert f"'flows.{name}': the flow name {name!r} is refused: {why}" in message


@pytest.mark.parametrize("name", ["implement", "unit-tests", "review_2", "v1.2", "T1"])
def test_ordinary_stage_names_pass(name: str) -> None:
    assert flow_of({"name": name, "action": "agent"}).stages[0].name == name


def test_stage_defined_twice() -> None:
    message = refusal(AGENT, SYNC, {"name": "sync", "action": "sync"})
    assert "'flows.default.stages[2].name'" in message
    assert "twice" in message


@pytest.mark.parametrize("body", [{}, {"stages": []}, {"stages": "implement"}, "stages"])
def test_a_flow_needs_stages(body: Any) -> None:
    with pytest.raises(FlowError, match=r"'flows\.quick"):
        parse({}, {"quick": body})


def test_a_stage_must_be_a_table() -> None:
    assert "'flows.default.stages[1]' must be a table" in refusal(AGENT, "sync")  # type: ignore[arg-type]


# --- defaults ------------------------------------------------------------------------


def test_stage_defaults() -> None:
    flow = flow_of(
        AGENT,
        {
            "name": "test",
            "action": "command",
            "command": ["make", "test"],
            "return_to": "implement",
        },
        {
            "name": "review",
            "action": "agent",
            "result_check": "panel",
            "reviewers": REVIEWERS,
        },
        SYNC,
        {"name": "merge", "action": "ff_only"},
    )
    implement, test, review, sync, merge = flow.stages
    for stage in flow.stages:
        assert stage.fail_action == "fail"
        assert stage.advisory is False
    assert implement.result_check == "exit_code"
    assert implement.return_to is None
    assert implement.returns == 0
    assert implement.command is None
    assert implement.prompt is None
    assert test.result_check == "exit_code"
    assert test.returns == 1
    assert test.command == ("make", "test")
    assert review.quorum == 2  # quorum defaults to the number of reviewers
    assert review.reviewers == (
        Reviewer("claude", ("claude", "-p", "{prompt}")),
        Reviewer("codex", ("codex", "exec", "{prompt}")),
    )
    assert sync.mode == "merge"
    assert merge.return_to is None
    assert merge.returns == 0


def test_advisory_and_explicit_values() -> None:
    flow = flow_of(
        AGENT,
        {"name": "lint", "action": "command", "command": ["lint"], "fail_action": "continue"},
        {"name": "sync", "action": "sync", "mode": "rebase"},
        MERGE,
    )
    assert flow.stages[1].advisory is True
    assert flow.stages[2].mode == "rebase"
    assert flow.stages[3].return_to == "sync"
    assert flow.stages[3].returns == 3


def test_default_flow_and_agent_settings() -> None:
    parsed = parse({}, {})
    assert set(parsed.flows) == {"default"}
    assert parsed.flows["default"] == default_flow()
    implement, sync, merge = parsed.flows["default"].stages
    assert (implement.name, implement.action, implement.result_check) == (
        "implement",
        "agent",
        "exit_code",
    )
    assert implement.prompt
    assert (sync.name, sync.action) == ("sync", "sync")
    assert (merge.name, merge.action, merge.return_to, merge.returns) == (
        "merge",
        "ff_only",
        "sync",
        3,
    )
    # Claude Code as the claude preset runs it (prompt on stdin, tools allowed, JSON).
    assert parsed.agent.command == DEFAULT_AGENT_COMMAND == presets.CLAUDE.command
    assert parsed.agent.stream == "claude"
    assert parsed.agent.stall_after_ms == 20 * 60_000
    assert parsed.agent.stall_kill_after_ms == 2 * 3_600_000


def test_flows_default_replaces_the_built_in_flow() -> None:
    parsed = parse(
        {"command": ["my-agent"], "stall_after": "1h30m"}, {"default": {"stages": [AGENT]}}
    )
    assert [s.name for s in parsed.flows["default"].stages] == ["implement"]
    assert parsed.agent.command == ("my-agent",)
    assert parsed.agent.stall_after_ms == 90 * 60_000


def test_other_flows_keep_the_built_in_default() -> None:
    parsed = parse({}, {"quick": {"stages": [AGENT]}})
    assert set(parsed.flows) == {"default", "quick"}
    assert parsed.flows["default"] == default_flow()


stage_names = st.builds(
    str.__add__,
    st.text(alphabet="abcdefghij", min_size=1, max_size=1),
    st.text(alphabet="abcdefghij_-", max_size=7),
)


@given(st.lists(stage_names, min_size=1, max_size=5, unique=True), st.data())
def test_snapshot_round_trips(names: list[str], data: st.DataObject) -> None:
    """A run's snapshot (``to_json``) gives back exactly the flow it was taken from."""
    stages: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        stage: dict[str, Any] = {"name": name, "action": "command", "command": ["run", name]}
        if index and data.draw(st.booleans()):
            stage["return_to"] = names[data.draw(st.integers(0, index))]
            stage["returns"] = data.draw(st.integers(1, 4))
        elif data.draw(st.booleans()):
            stage["fail_action"] = "continue"
        stages.append(stage)
    stages.append(
        {"name": "zz-review", "action": "agent", "result_check": "panel", "reviewers": REVIEWERS}
    )
    flow = flow_of(*stages)
    assert Flow.from_json(flow.to_json()) == flow


def test_snapshot_of_the_default_flow_round_trips() -> None:
    flow = default_flow()
    assert Flow.from_json(flow.to_json()) == flow
    assert isinstance(Flow.from_json(flow.to_json()).stages[0], Stage)


# --- sloop.toml through sloopd.core.config ----------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "sloop.toml").write_text(text, encoding="utf-8")
    return tmp_path / "sloop.toml"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            '[[flows.default.stages]]\nname = "implement"\naction = "agent"\nreturn_to = "nope"\n',
            "flows.default.stages[0].return_to",
        ),
        ('[[flows.default.stages]]\nname = "x"\naction = "agent"\ncolour = 1\n', "colour"),
        ('[agent]\nstall_after = "soon"\n', "agent.stall_after"),
        ("[repo]\nparallel = 0\n", "repo.parallel"),
        ("[repo]\nworkers = 2\n", "repo.workers"),
        ('[repo]\ntickets = "../elsewhere"\n', "repo.tickets"),
        ("[hooks]\npre = 1\n", "hooks"),
        ('[repo]\nbranch_prefix = "sloop..x/"\n', "repo.branch_prefix"),
        ('[repo]\nbranch_prefix = "/sloop/"\n', "repo.branch_prefix"),
        ('[repo]\nbranch_prefix = "a b/"\n', "repo.branch_prefix"),
        ('[repo]\nmain = "main.lock"\n', "repo.main"),
        ('[[flows.default.stages]]\nname = "unit/tests"\naction = "agent"\n', "stages[0].name"),
        ('[[flows."a/b".stages]]\nname = "x"\naction = "agent"\n', "flows.a/b"),
        ('flows = "default"\n', "flows"),
    ],
)
def test_config_load_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(tmp_path)
    message = str(caught.value)
    assert str(path) in message, message
    assert key in message, message


def test_config_load_refuses_invalid_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "[agent\ncommand = \n")
    with pytest.raises(config.ConfigError, match="not valid TOML") as caught:
        config.load(tmp_path)
    assert str(path) in str(caught.value)


def test_config_load_without_a_file_gives_defaults(tmp_path: Path) -> None:
    loaded = config.load(tmp_path)
    assert loaded.repo == config.RepoConfig()
    assert (loaded.repo.main, loaded.repo.tickets, loaded.repo.parallel) == ("main", "tickets", 2)
    assert loaded.repo.branch_prefix == "sloop/"
    assert loaded.flows == {"default": default_flow()}
    assert loaded.agent.command == DEFAULT_AGENT_COMMAND


def test_config_load_reads_the_design_example(tmp_path: Path) -> None:
    """The sloop.toml of DESIGN "Files in the repository" loads with the values it says."""
    write(tmp_path, DESIGN_EXAMPLE)
    loaded = config.load(tmp_path)
    assert loaded.repo.parallel == 2
    assert loaded.repo.branch_prefix == "sloop/"
    assert loaded.agent.stall_after_ms == 20 * 60_000
    assert loaded.agent.stall_kill_after_ms == 2 * 3_600_000
    stages = loaded.flows["default"].stages
    assert [s.name for s in stages] == ["implement", "test", "lint", "review", "sync", "merge"]
    test, lint, review, merge = stages[1], stages[2], stages[3], stages[5]
    assert (test.return_to, test.returns) == ("implement", 2)
    assert lint.advisory
    assert lint.result_check == "exit_code"
    assert review.result_check == "panel"
    assert review.quorum == 2
    assert len(review.reviewers) == 2
    assert (merge.action, merge.return_to, merge.returns) == ("ff_only", "sync", 3)
    assert tomllib.loads(DESIGN_EXAMPLE)  # and it is plain TOML


DESIGN_EXAMPLE = """
[repo]
main = "main"
tickets = "tickets"
parallel = 2
branch_prefix = "sloop/"

[agent]
command = ["claude", "-p", "{prompt}"]
stall_after = "20m"
stall_kill_after = "2h"

[[flows.default.stages]]
name = "implement"
action = "agent"
prompt = "Implement the ticket. Commit your work."
result_check = "exit_code"

[[flows.default.stages]]
name = "test"
action = "command"
command = ["make", "test"]
result_check = "exit_code"
return_to = "implement"
returns = 2

[[flows.default.stages]]
name = "lint"
action = "command"
command = ["make", "lint"]
fail_action = "continue"

[[flows.default.stages]]
name = "review"
action = "agent"
result_check = "panel"
quorum = 2
prompt = "Review the branch against the ticket; report one verdict with a reason."
reviewers = [ { target = "claude", command = ["claude", "-p", "{prompt}"] },
              { target = "codex",  command = ["codex", "exec", "{prompt}"] } ]

[[flows.default.stages]]
name = "sync"
action = "sync"

[[flows.default.stages]]
name = "merge"
action = "ff_only"
return_to = "sync"
returns = 3
"""


def test_presets_per_agent_section_stage_and_seat() -> None:
    parsed = parse(
        {"preset": "gemini", "env": ["EXTRA"]},
        {
            "default": {
                "stages": [
                    {"name": "implement", "action": "agent", "agent": "codex"},
                    {
                        "name": "review",
                        "action": "agent",
                        "result_check": "panel",
                        "reviewers": [
                            {"target": "claude", "agent": "claude"},
                            {"target": "own", "command": ["my-reviewer"]},
                        ],
                    },
                ]
            }
        },
    )
    agent = parsed.agent
    assert agent.command == presets.GEMINI.command
    assert agent.stream == "gemini"
    assert agent.env == (*presets.GEMINI.env, "EXTRA")
    implement, review = parsed.flows["default"].stages
    assert implement.command == presets.CODEX.command
    assert (implement.stream, implement.env) == ("codex", presets.CODEX.env)
    seat, own = review.reviewers
    assert (seat.command, seat.stream, seat.env) == (
        presets.CLAUDE.command,
        "claude",
        presets.CLAUDE.env,
    )
    assert (own.command, own.stream, own.env) == (("my-reviewer",), None, ())
    # The snapshot keeps what the preset resolved to.
    assert (
        type(parsed.flows["default"]).from_json(parsed.flows["default"].to_json())
        == (parsed.flows["default"])
    )


def test_an_explicit_command_assumes_no_stream() -> None:
    agent = parse({"command": ["my-agent"]}, {}).agent
    assert (agent.command, agent.stream, agent.env) == (("my-agent",), "none", ())


@pytest.mark.parametrize(
    ("agent", "stages", "message"),
    [
        ({"preset": "nope"}, [], "'agent.preset' must be one of claude | codex | gemini"),
        ({"preset": "codex", "command": ["x"]}, [], "set 'agent.preset' or 'agent.command'"),
        (
            {},
            [{"name": "t", "action": "command", "command": ["x"], "agent": "codex"}],
            "'flows.default.stages[0].agent' is only for agent stages",
        ),
        (
            {},
            [{"name": "i", "action": "agent", "agent": "codex", "command": ["x"]}],
            "set 'flows.default.stages[0].agent' or 'flows.default.stages[0].command'",
        ),
    ],
)
def test_preset_mistakes_name_the_key(
    agent: dict[str, object], stages: list[dict[str, object]], message: str
) -> None:
    flows = {"default": {"stages": stages}} if stages else {}
    with pytest.raises(FlowError, match=re.escape(message)):
        parse(agent, flows)
