"""The bundled example agent (``sloopd.examples.agent``) in a real worktree, no daemon.

It is run the way the daemon runs an agent stage: as a child in the run's
worktree, with the SLOOP_* variables set and a prompt file written outside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sloopd.examples import agent
from tests.support.gitrepo import git, head, make_repo

AGENT_PATH = Path(agent.__file__)
PROMPT = (
    "Implement the ticket. Commit your work.\n\n# Add a greeting\n\n"
    "Ticket T7 (greeting), run R3, stage 'implement' execution 1.\n\nSay hello.\n"
)


def worktree_env(worktree: Path, prompt_file: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOOP_")}
    env.update(
        SLOOP_RUN="R3",
        SLOOP_TICKET="T7",
        SLOOP_STAGE="implement",
        SLOOP_ATTEMPT="1",
        SLOOP_WORKTREE=str(worktree),
        SLOOP_PROMPT_FILE=str(prompt_file),
    )
    env.update(extra)
    return env


@pytest.fixture
def run_worktree(tmp_path: Path) -> tuple[Path, Path]:
    """A repository and a run worktree on its own branch, as the daemon makes them."""
    repo = make_repo(tmp_path, identity=False)  # the agent brings its own identity
    worktree = tmp_path / "state" / "worktrees" / "R3"
    git(repo, "worktree", "add", "--quiet", "-b", "sloop/greeting/1", str(worktree), "main")
    prompt = tmp_path / "state" / "runs" / "R3" / "prompt-implement-1.md"
    prompt.parent.mkdir(parents=True)
    prompt.write_text(PROMPT)
    return worktree, prompt


def run_agent(
    argv: list[str], worktree: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=worktree, env=env, capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize(
    "argv",
    [[sys.executable, "-m", "sloopd.examples.agent"], [sys.executable, str(AGENT_PATH)]],
    ids=["module", "path"],
)
def test_the_agent_commits_a_note_for_its_ticket(
    run_worktree: tuple[Path, Path], argv: list[str]
) -> None:
    worktree, prompt = run_worktree
    before = head(worktree)
    done = run_agent(argv, worktree, worktree_env(worktree, prompt))
    assert done.returncode == 0, done.stderr
    assert "example agent: committed" in done.stdout
    assert head(worktree, "HEAD~1") == before
    assert git(worktree, "status", "--porcelain") == ""
    assert git(worktree, "show", "--name-only", "--format=", "HEAD") == "notes/T7.md"
    assert git(worktree, "log", "-1", "--format=%an <%ae> %s") == (
        "sloop-example <example@sloop.invalid> T7: Add a greeting"
    )
    note = (worktree / "notes" / "T7.md").read_text()
    assert note.startswith("# Add a greeting\n")
    assert "- R3: stage 'implement' execution 1 worked on T7" in note


def test_a_second_execution_adds_a_commit(run_worktree: tuple[Path, Path]) -> None:
    # A return_to edge runs the agent again in the same worktree: still a change.
    worktree, prompt = run_worktree
    argv = [sys.executable, "-m", "sloopd.examples.agent"]
    assert run_agent(argv, worktree, worktree_env(worktree, prompt)).returncode == 0
    again = run_agent(argv, worktree, worktree_env(worktree, prompt, SLOOP_ATTEMPT="2"))
    assert again.returncode == 0, again.stderr
    assert git(worktree, "rev-list", "--count", "main..HEAD") == "2"
    assert "execution 2" in (worktree / "notes" / "T7.md").read_text()


def test_an_unreachable_worker_socket_does_not_fail_the_agent(
    run_worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    worktree, prompt = run_worktree
    env = worktree_env(
        worktree, prompt, SLOOP_SOCKET=str(tmp_path / "nobody.sock"), SLOOP_TOKEN="t"
    )
    done = run_agent([sys.executable, "-m", "sloopd.examples.agent"], worktree, env)
    assert done.returncode == 0, done.stderr
    assert "left a note" not in done.stdout
    assert git(worktree, "status", "--porcelain") == ""


def test_without_a_prompt_file_it_says_how_it_is_meant_to_run(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOOP_")}
    done = run_agent([sys.executable, "-m", "sloopd.examples.agent"], tmp_path, env)
    assert done.returncode == 1
    assert "SLOOP_PROMPT_FILE" in done.stderr


def test_title_is_the_first_heading() -> None:
    assert agent.title_of(PROMPT) == "Add a greeting"
    assert agent.title_of("no heading\n#nospace\n") == "untitled ticket"


def test_note_names_stay_inside_the_notes_folder() -> None:
    assert agent.note_path("T1") == Path("notes/T1.md")
    assert agent.note_path("../../etc/passwd") == Path("notes/etc-passwd.md")
