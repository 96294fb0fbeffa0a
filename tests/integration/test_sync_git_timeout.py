"""A ``sync`` whose ref update hangs in a hook is killed at ``repo.git_timeout``.

``sync`` computes its merge or rebase in the daemon's scratch repository, which runs no
hook; it records the result with one ``update-ref`` in the main repository, which runs
the repository's ``reference-transaction`` hook.  Past the run's ``git_timeout`` git and
the hook are killed and the stage fails with a reason naming the deadline
(docs/configuration.md).  Until issue 35 that call had a fixed 60 s.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import git, wait_until

# Holds the update of the sync's own ref (the flow's second stage: refs/sloop/runs/R1/1-1)
# at "prepared"; every other ref update (the run's branch made, the work brought back)
# passes.
SYNC_HANGS = """#!/bin/sh
[ "$1" = prepared ] || exit 0
while read old new ref; do
  case "$ref" in
    refs/sloop/runs/*/1-*)
      echo $$ > {flags}/hook.pid
      sleep {seconds}
      ;;
  esac
done
exit 0
"""
FLOWS = (
    "[[flows.default.stages]]\nname = 'implement'\naction = 'agent'\n\n"
    "[[flows.default.stages]]\nname = 'sync'\naction = 'sync'\n\n"
    "[[flows.default.stages]]\nname = 'merge'\naction = 'ff_only'\n"
)


def test_a_hook_that_hangs_fails_the_sync_at_git_timeout(bench: Bench) -> None:
    agent = bench.argv("--write", "synced.txt={run}")
    config = sloop_toml(agent, extra='[repo]\ngit_timeout = "2s"\n\n' + FLOWS)
    bench.setup(config, {"synced": ticket_text("Sync synced")})
    hooks = Path(git(bench.repo, "rev-parse", "--path-format=absolute", "--git-path", "hooks"))
    hooks.mkdir(exist_ok=True)
    hook = hooks / "reference-transaction"
    hook.write_text(SYNC_HANGS.format(flags=bench.root / "flags", seconds=120))
    hook.chmod(0o755)
    bench.start()
    bench.post("synced")
    run = bench.wait_run("R1", timeout=30)
    assert run["state"] == "failed", run
    sync = [s for s in run["stages"] if s["stage"] == "sync"][-1]
    assert "did not finish within 2 s" in sync["reason"], sync
    assert "synced.txt" not in git(bench.repo, "ls-tree", "--name-only", "main").splitlines()
    hook_pid = int(bench.path("hook.pid").read_text())
    wait_until(lambda: not Path(f"/proc/{hook_pid}").exists(), timeout=5)
    # The killed transaction's locks are gone: nothing is left to fail the next run.
    git_dir = Path(git(bench.repo, "rev-parse", "--absolute-git-dir"))
    assert [str(p) for p in (git_dir / "refs").rglob("*.lock")] == []
