"""Each preset also works when the daemon runs as an unprivileged user (issue 14).

The suite runs as root in CI, so every other preset test proves the root case
(Claude Code's permission bypass then needs ``IS_SANDBOX=1``, which the preset
sets).  Here the same presets run with the daemon as ``nobody``: its state, its
sockets and the repository belong to that user, bubblewrap runs without
privileges (a user namespace), and nothing of root's is reachable but the
interpreter and the CLIs it needs (``tests.support.unprivileged``).  A preset
must walk its ticket to ``merged`` with the CLI's commit on main, exactly as
as root.
"""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.integration.test_agent_presets import (
    RUN_TIMEOUT_S,
    install,
    merged_run,
    on_path,
    preset_toml,
)
from tests.support import unprivileged
from tests.support.agents import Bench, ticket_text
from tests.support.daemon import git
from tests.support.standins import anthropic, gemini, openai

# Why an unprivileged daemon cannot be started here (None: it can); CI runs as root.
_CANNOT = unprivileged.available()

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
    pytest.mark.skipif(_CANNOT is not None, reason=f"cannot run a daemon as nobody: {_CANNOT}"),
]


@pytest.fixture
def harness_trusts_foreign_repos(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness's own git calls (as root) on the repository nobody owns.

    git refuses a repository another user owns ("dubious ownership"); the test
    reads main through git, so it trusts every repository for its own calls.
    """
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "safe.directory")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "*")


def vendor_env(preset: str, stack: ExitStack) -> dict[str, str]:
    """The vendor's key and base URL, pointing at a stand-in the stack stops."""
    if preset == "claude":
        claude = stack.enter_context(anthropic.AnthropicStandIn())
        return {
            "ANTHROPIC_API_KEY": "sk-ant-api03-sloop-stand-in",
            "ANTHROPIC_BASE_URL": claude.url,
        }
    if preset == "codex":
        codex = stack.enter_context(openai.OpenAIStandin())
        return {
            "OPENAI_API_KEY": "sk-standin-key",
            "OPENAI_BASE_URL": codex.base_url,
            "CODEX_MODEL": "gpt-5.5",
        }
    if preset == "gemini":
        standin = gemini.GeminiStandIn().start()
        stack.callback(standin.stop)
        return {"GEMINI_API_KEY": "standin-key", "GOOGLE_GEMINI_BASE_URL": standin.url}
    return {}


@pytest.fixture
def as_nobody(bench: Bench, harness_trusts_foreign_repos: None) -> Bench:
    home = bench.root / "home"
    home.mkdir()
    bench.env["HOME"] = str(home)  # a service user's home; root's is not reachable
    return bench


@pytest.mark.parametrize("preset", ["claude", "codex", "gemini", "example"])
def test_a_preset_merges_with_the_daemon_running_as_an_unprivileged_user(
    as_nobody: Bench, preset: str
) -> None:
    bench = as_nobody
    clis = [] if preset == "example" else [preset]
    with ExitStack() as stack:
        on_path(bench, clis)
        bench.env.update(vendor_env(preset, stack))
        bench.setup(preset_toml(bench, preset, clis), {"hello": ticket_text("Add hello")})
        unprivileged.hand_over(bench.root)
        needed = [*unprivileged.interpreter_paths(), *(install(name) for name in clis)]
        bench.prefix = unprivileged.prefix(needed)
        bench.start()
        assert daemon_uid(bench) == unprivileged.NOBODY_UID
        # 0.9.0: copy-on-write checkouts work for a service user too (a user namespace,
        # userxattr, the child nobody again).
        workspaces = bench.dashboard()["daemon"]["sandbox"]["workspaces"]
        assert workspaces == {"mode": "layered", "reason": None}, workspaces
        if preset == "example":
            bench.post("hello")
            run = bench.wait_run("hello#1", timeout=RUN_TIMEOUT_S)
            assert run["state"] == "merged", run
            files = git(bench.repo, "ls-tree", "-r", "--name-only", "main").split()
            assert any(name.startswith("notes/") for name in files), files
        else:
            run = merged_run(bench, "hello")
    implement = run["stages"][0]
    assert implement["state"] == "passed", implement
    if preset != "example":
        assert run["usage"]["output_tokens"] > 0, run["usage"]
    # The daemon's files are the service user's, as they would be on a CI host.
    assert (bench.state_dir / "store.sqlite3").stat().st_uid == unprivileged.NOBODY_UID


def daemon_uid(bench: Bench) -> int:
    """The real uid of the sloopd process (the prefix's last exec is sloopd itself)."""
    assert bench.daemon is not None
    assert bench.daemon.proc is not None
    status = Path(f"/proc/{bench.daemon.proc.pid}/status").read_text()
    line = next(entry for entry in status.splitlines() if entry.startswith("Uid:"))
    return int(line.split()[1])
