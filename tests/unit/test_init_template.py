"""``sloopctl init``: the sloop.toml it writes is what the daemon loads by default.

The template is text in sloopctl (which may import nothing of the daemon but its
schema); these tests hold it to the daemon's own loader and defaults.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from sloopctl import init_template
from sloopctl.cli import main
from sloopd.core import config
from sloopd.flows import flow, presets
from sloopd.queue import tickets

# A commented-out key (`# returns = 2`), table header or continuation line.
_COMMENTED_OUT = re.compile(r"^# (?=\[\[|\[pricing\.|\[executor\]|[a-z_]+ = |\s+\{)")


def uncommented(text: str) -> str:
    """The template with every commented-out example line switched on."""
    return "\n".join(_COMMENTED_OUT.sub("", line) for line in text.splitlines())


def test_the_template_parses_with_the_daemons_loader() -> None:
    config.parse(tomllib.loads(init_template.SLOOP_TOML))


def test_the_template_states_exactly_the_daemons_defaults() -> None:
    # "Every value below is the default": no sloop.toml and this one are the same.
    parsed = config.parse(tomllib.loads(init_template.SLOOP_TOML))
    defaults = config.Config()
    assert (parsed.repo, parsed.agent, parsed.flows) == (
        defaults.repo,
        defaults.agent,
        defaults.flows,
    )
    # No [[vendor.patterns]] of its own: the same table as a file without [vendor].
    assert parsed.vendor_patterns == config.parse({}).vendor_patterns


def test_the_default_flow_is_implement_sync_merge() -> None:
    parsed = config.parse(tomllib.loads(init_template.SLOOP_TOML))
    stages = parsed.flows["default"].stages
    assert [(s.name, s.action) for s in stages] == [
        ("implement", "agent"),
        ("sync", "sync"),
        ("merge", "ff_only"),
    ]
    assert stages[0].result_check == "exit_code"
    assert (stages[2].return_to, stages[2].returns) == ("sync", 3)


def test_every_commented_example_is_valid_when_switched_on() -> None:
    text = uncommented(init_template.SLOOP_TOML)
    # max_cost_usd over the Codex seat needs its model, priced by the [pricing] example.
    parsed = config.parse(tomllib.loads(text), environ={"CODEX_MODEL": "gpt-5.5"})
    names = [s.name for s in parsed.flows["default"].stages]
    assert names == ["implement", "lint", "self-check", "review", "sync", "test", "merge"]
    review = parsed.flows["default"].stage("review")
    assert review is not None
    assert review.quorum == 2
    assert len(review.reviewers) == 2
    extra = len(parsed.vendor_patterns) - len(config.parse({}).vendor_patterns)
    assert extra == 1
    assert parsed.vendor_patterns[0].classification == "rate_limited"


def test_the_template_shows_the_merge_queues_gate_after_sync_commented_out() -> None:
    text = init_template.SLOOP_TOML
    # Commented out (no test command is known), right after sync, explained.
    sync = text.index('name = "sync"\n')
    gate = text.index(init_template.GATE_STAGE, sync)
    assert gate < text.index('name = "merge"\n', sync)
    assert "merge queue's gate" in text[sync:gate]
    assert "merge_window" in text[sync:gate]
    # Switched on, it is a gate of the merge queue: a command stage between the
    # landing's sync and its ff_only, without network, sending its failures back.
    parsed = config.parse(tomllib.loads(uncommented(text)), environ={"CODEX_MODEL": "gpt-5.5"})
    stages = parsed.flows["default"].stages
    names = [s.name for s in stages]
    assert names[names.index("sync") :] == ["sync", "test", "merge"]
    test = parsed.flows["default"].stage("test")
    assert test is not None
    assert (test.action, test.command, test.network) == ("command", ("make", "test"), False)
    assert (test.return_to, test.returns) == ("implement", 2)
    # And the [repo] key that sizes the window is documented, commented out.
    assert re.search(r"^#   merge_window = \d+$", text, re.MULTILINE)


@pytest.mark.parametrize("agent", init_template.AGENT_PRESETS)
def test_a_known_test_command_switches_the_gate_on(agent: str) -> None:
    text = init_template.sloop_toml(agent, ["pytest", "-q", 'tests/it\'s "odd"'])
    parsed = config.parse(tomllib.loads(text))
    stages = parsed.flows["default"].stages
    assert [(s.name, s.action) for s in stages] == [
        ("implement", "agent"),
        ("sync", "sync"),
        ("test", "command"),
        ("merge", "ff_only"),
    ]
    assert stages[2].command == ("pytest", "-q", 'tests/it\'s "odd"')
    assert stages[2].network is False
    # Everything else is the template's: only the gate's lines changed.
    assert init_template.sloop_toml(agent, None) == init_template.sloop_toml(agent)
    assert len(text.splitlines()) == len(init_template.sloop_toml(agent).splitlines())


@pytest.mark.parametrize(
    "key",
    [
        "repo.main",
        "repo.tickets",
        "repo.parallel",
        "repo.branch_prefix",
        "repo.max_ticket_bytes",
        "agent.preset",
        "agent.prompt_in_argv",
        "agent.agent_timeout",
        "agent.command_timeout",
        "agent.transient_retries",
        "agent.transient_backoff",
        "agent.transient_backoff_max",
        "agent.stall_after",
        "agent.stall_kill_after",
        "agent.cooldown",
        "agent.max_cooldown",
        "agent.max_log_lines",
        "agent.max_log_bytes",
        "agent.env",
        "agent.ro_mounts",
        "agent.rw_mounts",
    ],
)
def test_every_repo_and_agent_key_is_written_out(key: str) -> None:
    section, name = key.split(".")
    assert name in tomllib.loads(init_template.SLOOP_TOML)[section]


@pytest.mark.parametrize("key", ["classification", "regex", "vendor"])
def test_every_vendor_pattern_key_is_documented_and_shown(key: str) -> None:
    text = init_template.SLOOP_TOML
    assert re.search(rf"^#   {key} ", text, re.MULTILINE), f"{key} not documented"
    assert re.search(rf"^# {key} = ", text, re.MULTILINE), f"{key} not shown"


@pytest.mark.parametrize("key", sorted(flow._STAGE_KEYS))
def test_every_stage_key_is_documented_and_shown(key: str) -> None:
    text = init_template.SLOOP_TOML
    assert re.search(rf"^#   {key} ", text, re.MULTILINE), f"{key} not documented"
    assert re.search(rf"^(# )?{key} = ", text, re.MULTILINE), f"{key} not shown"


def test_the_example_ticket_parses_with_front_matter() -> None:
    text = init_template.EXAMPLE_TICKET_TEXT
    assert text.startswith("+++\n")
    ticket = tickets.parse(text, "tickets/example.md", "tickets", {"default"})
    assert ticket.name == "example"
    assert ticket.title == "Write a note about this ticket"
    assert (ticket.flow, ticket.project, ticket.priority) == ("default", "default", 0)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    sub = tmp_path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)  # init finds the repository root from anywhere inside
    return tmp_path


def test_init_writes_the_files_at_the_repository_root(repo: Path) -> None:
    result = CliRunner().invoke(main, ["init"])
    assert result.exit_code == 0, result.output
    assert (repo / "sloop.toml").read_text() == init_template.SLOOP_TOML
    assert (repo / "tickets" / "example.md").read_text() == init_template.EXAMPLE_TICKET_TEXT
    loaded = config.load(repo)
    assert loaded.source == repo / "sloop.toml"
    assert (loaded.repo, loaded.agent, loaded.flows) == (
        config.Config().repo,
        config.Config().agent,
        config.Config().flows,
    )


def test_init_test_command_writes_the_gate_stage(repo: Path) -> None:
    result = CliRunner().invoke(main, ["init", "--test-command", "make check V=1"])
    assert result.exit_code == 0, result.output
    assert "the merge queue's gate runs 'make check V=1'" in result.output
    stages = config.load(repo).flows["default"].stages
    assert [s.name for s in stages] == ["implement", "sync", "test", "merge"]
    assert stages[2].command == ("make", "check", "V=1")


@pytest.mark.parametrize("command", ["", "  ", "make 'test"])
def test_init_refuses_a_test_command_it_cannot_split(repo: Path, command: str) -> None:
    result = CliRunner().invoke(main, ["init", "--test-command", command])
    assert result.exit_code == 2
    assert "--test-command" in result.output
    assert not (repo / "sloop.toml").exists()


def test_init_refuses_to_overwrite_without_force(repo: Path) -> None:
    (repo / "sloop.toml").write_text("# mine\n")
    result = CliRunner().invoke(main, ["init"])
    assert result.exit_code == 1
    assert "--force" in result.output
    assert (repo / "sloop.toml").read_text() == "# mine\n"


def test_init_force_overwrites_but_keeps_an_existing_example_ticket(repo: Path) -> None:
    (repo / "sloop.toml").write_text("# mine\n")
    (repo / "tickets").mkdir()
    (repo / "tickets" / "example.md").write_text("# Mine\n")
    result = CliRunner().invoke(main, ["init", "--force"])
    assert result.exit_code == 0, result.output
    assert (repo / "sloop.toml").read_text() == init_template.SLOOP_TOML
    assert (repo / "tickets" / "example.md").read_text() == "# Mine\n"


def test_init_outside_a_repository_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    result = CliRunner().invoke(main, ["init"])
    assert result.exit_code == 2
    assert not (tmp_path / "sloop.toml").exists()


@pytest.mark.parametrize("agent", init_template.AGENT_PRESETS)
def test_init_agent_writes_that_preset(repo: Path, agent: str) -> None:
    result = CliRunner().invoke(main, ["init", "--agent", agent])
    assert result.exit_code == 0, result.output
    loaded = config.load(repo)
    chosen = presets.PRESETS[agent]
    assert loaded.agent.command == chosen.command
    assert loaded.agent.stream == (chosen.stream or "none")
    assert set(chosen.env) <= set(loaded.agent.env)


def test_the_cli_knows_every_daemon_preset() -> None:
    assert set(init_template.AGENT_PRESETS) == set(presets.PRESETS)
