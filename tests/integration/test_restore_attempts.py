"""A store restored from an older backup numbers its new runs past what the forgotten
runs left (issue 23, item 6).

The restored store has forgotten the runs made after its backup, but git and the
state directory have not: their branches (an unmerged run's stays on purpose),
their ``refs/sloop/runs/<run>/`` refs, checkouts and run folders.  A new run must
neither reuse an attempt whose branch exists nor a run id whose checkout or HOME
is still there, and what the old run left stays untouched for inspection.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import git, sloopd, wait_until


def store(command: str, state_dir: Path, *extra: str) -> str:
    done = sloopd("store", command, "--state-dir", str(state_dir), *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_a_ticket_runs_again_after_an_older_backup_is_restored(bench: Bench) -> None:
    # R1 fails (its branch and checkout stay, as for any unmerged run); a later run passes.
    agent = bench.argv("--write", "t1.txt=made by {run}", "--exit-run", "R1:1")
    bench.setup(sloop_toml(agent), {"t1": ticket_text("One")})
    bench.start()
    assert bench.stop() == 0, bench.log()
    backup = store("backup", bench.state_dir)  # taken before the ticket ever ran

    bench.start()
    bench.post("t1")
    first = bench.wait_run("t1#1")
    assert (first["id"], first["state"], first["branch"]) == ("R1", "failed", "sloop/t1/1")
    old_tip = bench.rev("refs/heads/sloop/t1/1")
    old_checkout = bench.worktree_of("R1")
    assert old_checkout.is_dir()
    assert bench.stop() == 0, bench.log()

    store("restore", bench.state_dir, backup)
    bench.start()
    assert bench.dashboard()["recent_total"] == 0  # the restored store knows no run
    bench.post("t1")
    again = bench.wait_run(_only_run(bench))
    assert again["state"] == "merged", again
    # Numbered past what the forgotten run left: another attempt, another run id.
    assert again["attempt"] == 2, again
    assert again["alias"] == "t1#2"
    assert again["branch"] == "sloop/t1/2"
    assert again["id"] != "R1"
    assert "made by " + again["id"] in git(bench.repo, "show", "main:t1.txt")
    # What the old run left is untouched: its branch and its checkout.
    assert bench.rev("refs/heads/sloop/t1/1") == old_tip
    assert old_checkout.is_dir()
    events = bench.event_kinds(again["id"])
    assert events[0] == "run_claimed"


def _only_run(bench: Bench) -> str:
    """The id of the ticket's one run, once it is claimed."""
    runs: list[dict[str, object]] = wait_until(lambda: bench.ticket("t1")["runs"])
    assert len(runs) == 1, runs
    return str(runs[0]["id"])


def test_a_new_run_never_takes_the_id_of_a_forgotten_run_whose_folders_remain(
    bench: Bench,
) -> None:
    """The old branch is gone (deleted by hand), its checkout and HOME are not: the
    attempt number is free again, the run id is not."""
    bench.setup(
        sloop_toml(bench.argv("--write", "t1.txt={run}", "--exit-run", "R1:1")),
        {"t1": ticket_text("One")},
    )
    bench.start()
    assert bench.stop() == 0, bench.log()
    backup = store("backup", bench.state_dir)
    bench.start()
    bench.post("t1")
    assert bench.wait_run("t1#1")["state"] == "failed"
    assert bench.stop() == 0, bench.log()
    git(bench.repo, "branch", "-D", "sloop/t1/1")
    home = bench.state_dir / "runs" / "R1" / "home"
    assert home.is_dir()
    (home / "left-by-R1").write_text("an old run's file\n")

    store("restore", bench.state_dir, backup)
    bench.start()
    bench.post("t1")
    again = bench.wait_run(_only_run(bench))
    assert again["state"] == "merged", again
    assert again["alias"] == "t1#1"  # no branch claims attempt 1 any more
    assert again["id"] != "R1"
    assert (home / "left-by-R1").is_file()  # R1's folders stay, nobody else's
    assert git(bench.repo, "show", "main:t1.txt") == again["id"]
