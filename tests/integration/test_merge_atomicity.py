"""A merge is atomic in the record: whatever stops the daemon, merged ⇔ main moved.

Each test holds the merge at one moment with a hook in the main repository —
``reference-transaction`` at ``prepared`` (the intent is written, the ref has not
moved) or ``post-merge`` (the ref has moved, the record does not say so yet) —
and then kills the daemon with SIGKILL.  Afterwards the run is ``merged`` exactly
when main holds its commit, and a merged ticket has no second run.  A hook that
hangs is killed at ``repo.git_timeout`` and fails the stage with a reason.  An
abort or a SIGTERM at those moments kills the hook at once and settles from the
ref: tests/integration/test_hung_hooks.py.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from tests.support.agents import Bench, printer_argv, sloop_toml, ticket_text
from tests.support.daemon import git, query, wait_until

# Holds the ref update to main (only that one) at "prepared": after the intent.
BEFORE_MOVE = """#!/bin/sh
[ "$1" = prepared ] || exit 0
while read old new ref; do
  if [ "$ref" = refs/heads/main ]; then
    echo $$ > {flags}/hook.pid
    touch {flags}/in-merge
    sleep {seconds}
  fi
done
exit 0
"""
# Runs after a fast-forward of the checked-out main: the ref has already moved.
AFTER_MOVE = """#!/bin/sh
touch {flags}/in-merge
sleep {seconds}
"""


def hook(bench: Bench, name: str, text: str, seconds: float) -> None:
    hooks = Path(git(bench.repo, "rev-parse", "--path-format=absolute", "--git-path", "hooks"))
    hooks.mkdir(exist_ok=True)
    path = hooks / name
    path.write_text(text.format(flags=bench.root / "flags", seconds=seconds))
    path.chmod(0o755)


def walk_to_merge(
    bench: Bench, name: str, hooked: tuple[str, str, float], *, extra: str = ""
) -> None:
    agent = bench.argv("--write", f"{name}.txt={{run}}")
    bench.setup(sloop_toml(agent, extra=extra), {name: ticket_text(f"Merge {name}")})
    hook(bench, *hooked)  # after the set-up commits, which would run it too
    bench.start()
    bench.post(name)
    wait_until(lambda: bench.path("in-merge").exists(), timeout=30)


def main_holds(bench: Bench, name: str) -> bool:
    return name + ".txt" in git(bench.repo, "ls-tree", "--name-only", "main").splitlines()


def runs_of(bench: Bench) -> list[tuple[str, str]]:
    return [(str(r[0]), str(r[1])) for r in query(bench.state_dir, "SELECT id, state FROM runs")]


def assert_checkout_clean(bench: Bench) -> None:
    """The operator's checkout as a merge that did not happen leaves it: at main, no locks."""
    assert git(bench.repo, "status", "--porcelain", "--untracked-files=no") == ""
    git_dir = Path(git(bench.repo, "rev-parse", "--absolute-git-dir"))
    left = [p.name for p in (git_dir / "HEAD.lock", git_dir / "index.lock") if p.exists()]
    left += [str(p) for p in (git_dir / "refs").rglob("*.lock")]
    assert left == [], left


def test_sigkill_before_the_ref_moves_waits_for_git_then_reads_the_ref(bench: Bench) -> None:
    # The killed daemon's git goes on and moves main after it died: the next daemon
    # must wait for it before deciding, or the record would say aborted while main moved.
    walk_to_merge(bench, "killed", ("reference-transaction", BEFORE_MOVE, 1.5))
    assert bench.daemon is not None
    bench.daemon.kill9()
    bench.start()
    run = bench.wait_run("R1")
    assert main_holds(bench, "killed")
    assert run["state"] == "merged", run
    merge = [s for s in run["stages"] if s["stage"] == "merge"][-1]
    assert "before the daemon restarted" in (merge["reason"] or ""), merge
    time.sleep(1.0)
    assert runs_of(bench) == [("R1", "merged")]


def test_sigkill_after_the_ref_moved_settles_merged(bench: Bench) -> None:
    walk_to_merge(bench, "moved", ("post-merge", AFTER_MOVE, 1.5))
    assert bench.daemon is not None
    bench.daemon.kill9()
    bench.start()
    run = bench.wait_run("R1")
    assert run["state"] == "merged", run
    assert main_holds(bench, "moved")
    time.sleep(1.0)
    assert runs_of(bench) == [("R1", "merged")]
    assert bench.ticket("moved")["state"] == "merged"


def test_a_hook_that_hangs_fails_the_merge_at_git_timeout(bench: Bench) -> None:
    flows = (
        "[[flows.default.stages]]\nname = 'implement'\naction = 'agent'\n\n"
        "[[flows.default.stages]]\nname = 'sync'\naction = 'sync'\n\n"
        "[[flows.default.stages]]\nname = 'merge'\naction = 'ff_only'\n"
    )
    walk_to_merge(
        bench,
        "hangs",
        ("reference-transaction", BEFORE_MOVE, 120),
        extra='[repo]\ngit_timeout = "2s"\n\n' + flows,
    )
    run = bench.wait_run("R1", timeout=30)
    assert run["state"] == "failed", run
    merge = [s for s in run["stages"] if s["stage"] == "merge"][-1]
    assert "did not finish within 2 s" in merge["reason"], merge
    assert not main_holds(bench, "hangs")
    hook_pid = int(bench.path("hook.pid").read_text())
    wait_until(lambda: not Path(f"/proc/{hook_pid}").exists(), timeout=5)
    # Killed at prepared: what it left (main.lock, HEAD.lock, files moved ahead of the
    # ref) is cleaned up, or every later merge would fail on it.
    assert_checkout_clean(bench)


def test_a_stopped_daemon_is_not_the_agents_silence(bench: Bench) -> None:
    # stall_kill_after is 2 s; the daemon is stopped for 4 s while its agent waits on a
    # note to it.  The agent must not be killed as stalled.
    steps: list[dict[str, Any]] = [
        {"do": "touch", "path": str(bench.path("started"))},
        {"do": "wait", "path": str(bench.path("go"))},
        {"do": "note", "text": "blocked on a stopped daemon"},
        {"do": "lines", "text": "after {n}", "first": 1, "last": 3},
    ]
    config = sloop_toml(
        printer_argv(bench, steps), flows={"default": [{"name": "implement", "action": "agent"}]}
    ).replace("[agent]\n", '[agent]\nstall_after = "1s"\nstall_kill_after = "2s"\n', 1)
    bench.setup(config, {"paused": ticket_text("Wait on a stopped daemon")})
    bench.start()
    bench.post("paused")
    wait_until(lambda: bench.path("started").exists(), timeout=30)
    assert bench.daemon is not None
    assert bench.daemon.proc is not None
    bench.daemon.proc.send_signal(signal.SIGSTOP)
    try:
        bench.release("go")
        time.sleep(4)
    finally:
        bench.daemon.proc.send_signal(signal.SIGCONT)
    run = bench.wait_run("R1")
    implement = run["stages"][0]
    assert implement["state"] == "passed", (run["classification"], implement)
