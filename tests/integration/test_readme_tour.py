"""The README's five-minute tour, followed literally: every ``sh`` block of its section
runs as written, in order, in a new repository, through the installed commands.

Seen in 0.8.0, following it by hand: the README said to set ``command = [...]`` where
``sloopctl init`` had already set ``preset``, so the daemon refused to start; the
example ticket merged in a second, so every command of "Steer it" failed for want of a
run in flight; ``show`` printed ``Tickets: none`` beside a merged ticket.  ``$EDITOR``
is the one line a person types for themselves: here it is a script that makes the
edit the tour's text asks for (``preset = "example"``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.daemon import REPO_ROOT

pytestmark = pytest.mark.skipif(
    shutil.which("nc") is None or shutil.which("bwrap") is None,
    reason="the tour's socket example needs nc (netcat-openbsd) and its runs bubblewrap; "
    "make test installs both",
)

EDITOR = """#!/bin/sh
# What the tour asks of a person without an agent vendor: the example preset.
sed -i 's/^preset = "claude"$/preset = "example"/' "$1"
grep -q '^preset = "example"$' "$1"
"""


def tour_blocks() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## A five-minute tour")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```sh\n(.*?)```", text[start:end], re.DOTALL)


@pytest.fixture
def person(sandbox: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    repo = sandbox / "project"
    repo.mkdir()
    editor = sandbox / "editor"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOOP_")}
    env.update(
        PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
        EDITOR=str(editor),
        NO_COLOR="1",
        GIT_AUTHOR_NAME="A Person",
        GIT_AUTHOR_EMAIL="person@example.invalid",
        GIT_COMMITTER_NAME="A Person",
        GIT_COMMITTER_EMAIL="person@example.invalid",
    )
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    (repo / "README.md").write_text("# A project\n")
    subprocess.run(["git", "add", "README.md"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "start"], cwd=repo, check=True, env=env)
    try:
        yield repo, env
    finally:
        stop_daemon(repo, env)


def stop_daemon(repo: Path, env: dict[str, str]) -> None:
    """The daemon ``sloopctl daemon`` started: ended by its pid, as an operator would."""
    done = subprocess.run(
        ["sloopctl", "--json", "show"], cwd=repo, env=env, capture_output=True, check=False
    )
    if done.returncode != 0:
        return
    pid = orjson.loads(done.stdout)["data"]["daemon"]["pid"]
    os.kill(pid, signal.SIGTERM)
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def run_block(block: str, repo: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, f"{block}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_readme_tour_works_as_written(person: tuple[Path, dict[str, str]]) -> None:
    repo, env = person
    blocks = tour_blocks()
    said = [block.split("\n", 1)[0] for block in blocks]
    assert said[:3] == [
        "sloopctl init                  # a commented sloop.toml and tickets/example.md",
        "sloopctl daemon                # or: sloopd serve",
        "sloopctl post tickets/example.md",
    ]
    setup, daemon, post, look, steer, follow, socket, clean = blocks
    run_block(setup, repo, env)
    assert 'preset = "example"' in (repo / "sloop.toml").read_text()
    run_block(daemon, repo, env)
    run_block(post, repo, env)
    shown = run_block(look, repo, env)
    assert "example#1" in shown
    assert "running" in shown  # the example ticket takes its time: something to steer
    steered = run_block(steer, repo, env)
    assert "R1 example#1 aborted" in steered
    followed = run_block(follow, repo, env)
    assert followed.count("merged") >= 1
    assert "R2 merged" in followed
    assert "notes/T1.md" in followed  # the diff: what the example agent wrote
    answered = run_block(socket, repo, env)
    assert answered.startswith('{"id":"1","ok":true')
    run_block(clean, repo, env)
    dashboard = run_block("sloopctl show", repo, env)
    assert "settled lately: example merged" in dashboard
    assert "Tickets: none\n" not in dashboard
