"""A full disk is no run's fault: a run whose checkout or bring-back finds no room is
queued again (issue 34, item 11).

The state directory is an 8 MiB tmpfs holding the store, the runs' checkouts and their
git HOMEs, as by default.  On 0.8.0 an agent that flooded output while the disk was
full had its run failed ``cannot read the files of <state>/checkouts/R1: no message.``
(classification ``unknown``), and the drop record said "the store's filesystem had
5.1 MiB free, less than the 819.2 KiB kept free".  What must hold:

- a stage whose bring-back (or a run whose checkout) finds the disk full fails
  ``disk_full``, a transient failure: the ticket is queued again after the transient
  backoff, no ``return_to`` is spent, and the reason names the filesystem and its free
  bytes; once space returns the ticket's next run merges;
- the drop record's numbers agree with each other: the free space it names is less than
  the room it says the output needed, which is the output's size plus the reserve;
- nothing stored is lost: every line printed is stored or counted, cursors have no gap,
  the store passes ``integrity_check``.

Skipped, with the reason, where mounting a tmpfs is refused (not root).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import query, wait_until
from tests.support.disk import all_records, fill, leave_free, small_tmpfs
from tests.support.gitrepo import git as git_as_tester

LINES = 20_000
TMPFS_BYTES = 8 * 1024 * 1024
# Room enough for the store's own small writes, short of what git and output need
# (sloopd.runs.disk_full takes less than 1 MiB free as a full disk).
SHORT_BYTES = 640 * 1024
# Every run: quick retries, enough of them for a disk that stays short a while.
RETRIES = 'transient_retries = 8\ntransient_backoff = "1s"\ntransient_backoff_max = "2s"\n'

# Every run commits; the run argv[3] names then waits for the test to fill the disk,
# floods, and exits at once: its bring-back runs on the full disk.
FLOODER = r"""
import os, subprocess, sys, time
flags, lines, flooding = sys.argv[1], int(sys.argv[2]), sys.argv[3]
run = os.environ["SLOOP_RUN"]
with open(f"work-{run}.txt", "w") as f:
    f.write("work\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", run],
               check=True)
if run == flooding:
    open(os.path.join(flags, "committed"), "w").close()
    while not os.path.exists(os.path.join(flags, "flood")):
        time.sleep(0.02)
    for n in range(lines):
        print(f"line {n:06d} " + "x" * 60, flush=(n % 200 == 0))
    sys.stdout.flush()
    open(os.path.join(flags, "flooded"), "w").close()
"""

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_SIZE = r"([\d.]+) (B|KiB|MiB|GiB)"
_HELD = re.compile(
    rf"had {_SIZE} free, less than the {_SIZE} needed to store {_SIZE} more output "
    rf"and keep {_SIZE} free for runs"
)


@pytest.fixture
def small_state_dir(bench: Bench) -> Iterator[Path]:
    with small_tmpfs(bench, TMPFS_BYTES) as state:
        yield state


def sizes(text: str) -> list[float]:
    """The four sizes a drop record's reason names, in bytes: free, needed, output, kept."""
    found = _HELD.search(text)
    assert found is not None, text
    groups = found.groups()
    return [float(groups[i]) * _UNITS[groups[i + 1]] for i in range(0, 8, 2)]


def ticket_runs(bench: Bench, ticket: str) -> list[dict[str, Any]]:
    """The ticket's runs so far, oldest first (``ticket#n`` until one is missing)."""
    runs: list[dict[str, Any]] = []
    while (run := bench.show_run(f"{ticket}#{len(runs) + 1}")) is not None:
        runs.append(run)
    return runs


def assert_queued_again_for_the_disk(run: dict[str, Any], state_dir: Path) -> None:
    assert run["state"] == "failed", (run["stages"], run["reason"])
    assert run["classification"] == "disk_full", (run["classification"], run["reason"])
    assert run["diagnosis"]["classification"] == "disk_full", run["diagnosis"]
    reason = run["reason"]
    assert "disk_full (" in reason, reason
    assert f"free on the filesystem of {state_dir}" in reason, reason
    assert re.search(rf"{_SIZE} of {_SIZE} free", reason), reason
    assert "queued again in" in reason, reason
    assert "transient retry" in reason, reason


def test_a_bring_back_on_a_full_disk_queues_the_ticket_again_and_loses_nothing(
    bench: Bench, small_state_dir: Path
) -> None:
    flooder = bench.root / "agents" / "flooder.py"
    flooder.write_text(FLOODER)
    agent = [bench.argv()[0], str(flooder), str(bench.root / "flags"), str(LINES), "R1"]
    flow: list[dict[str, Any]] = [
        {"name": "implement", "action": "agent", "return_to": "implement", "returns": 3},
        {"name": "sync", "action": "sync"},
        {"name": "merge", "action": "ff_only"},
    ]
    config = sloop_toml(agent, flows={"default": flow}).replace("[agent]\n", "[agent]\n" + RETRIES)
    bench.setup(config, {"flood": ticket_text("Flood on a full disk")})
    bench.start()
    bench.post("flood")
    wait_until(lambda: bench.path("committed").exists(), timeout=30)
    ballast = small_state_dir / "ballast"
    fill(ballast)
    bench.release("flood")
    wait_until(lambda: bench.path("flooded").exists(), timeout=60)
    # The bring-back runs on the full disk: the listing it starts with makes its list
    # file (an empty file takes no block) in the run's git HOME (sloopd.git.checkout_edits).
    # Whatever the daemon frees meanwhile (a store file shrinking) is filled again.
    attempted = small_state_dir / "runs" / "R1" / "git-home" / ".sloop-left"

    def tried_on_a_full_disk() -> bool:
        fill(ballast)
        if attempted.exists():
            return True
        # On a loaded host one fill may outlast the whole attempt: the run settled and
        # its folder went between two looks. Its stages then say what happened (below).
        run = bench.show_run("R1")
        return run is not None and run.get("terminal") is True

    wait_until(tried_on_a_full_disk, timeout=60, interval=0.01)
    kept_full_until = time.monotonic() + 2.0
    while time.monotonic() < kept_full_until:
        fill(ballast)
        time.sleep(0.01)

    # Still short of room, but the store takes the daemon's own records: R1 settles.
    leave_free(ballast, SHORT_BYTES)
    first = bench.wait_run("R1", timeout=120)
    assert_queued_again_for_the_disk(first, small_state_dir)
    tries = [(s["attempt"], s["state"]) for s in first["stages"] if s["stage"] == "implement"]
    assert tries == [(1, "failed")], first["stages"]  # no return_to spent
    assert first["stages"][0]["reason"].startswith("out of disk space: "), first["stages"][0]
    assert first["halt"] == "fail_action", first

    # Space returns: the ticket's next run merges by itself.
    ballast.unlink()
    wait_until(lambda: bench.ticket("flood")["state"] == "merged", timeout=120)
    runs = ticket_runs(bench, "flood")
    assert runs[-1]["state"] == "merged", runs[-1]
    for run in runs[:-1]:
        assert_queued_again_for_the_disk(run, small_state_dir)

    # Nothing stored is lost, and the drop records' numbers agree with each other.
    records = all_records(bench, "R1")
    cursors = [int(r["cursor"]) for r in records]
    assert cursors == list(range(1, len(cursors) + 1)), "a cursor gap"
    stored = [r for r in records if r["stream"] == "stdout" and r["text"].startswith("line ")]
    losses = [r for r in records if r.get("dropped", {}).get("cause") == "store"]
    dropped = sum(r["dropped"]["streams"].get("stdout", 0) for r in losses)
    assert len(stored) + dropped == LINES, (len(stored), dropped)
    assert losses, "the disk was full while the agent printed, yet no loss is on record"
    for loss in losses:
        if "needed to store" not in loss["text"]:
            continue  # dropped while the store itself refused: its own words
        free, needed, output, kept = sizes(loss["text"])
        assert free < needed, loss["text"]
        # Each size is rounded to a tenth of its unit.
        assert abs(needed - (output + kept)) <= 0.05 * max(needed, 1 << 10) + 1, loss["text"]
    assert any("needed to store" in loss["text"] for loss in losses), [
        loss["text"] for loss in losses
    ]
    assert query(bench.state_dir, "PRAGMA integrity_check") == [("ok",)]


def test_a_checkout_the_disk_has_no_room_for_queues_the_ticket_again(
    bench: Bench, small_state_dir: Path
) -> None:
    """The run's checkout is made at its start: on a disk with less room than the
    repository's files it fails ``disk_full``, the half-made checkout goes, and once
    space returns a later run of the ticket merges."""
    flooder = bench.root / "agents" / "flooder.py"
    flooder.write_text(FLOODER)
    agent = [bench.argv()[0], str(flooder), str(bench.root / "flags"), "0", "-"]
    bench.setup(sloop_toml(agent, extra=RETRIES), {"big": ticket_text("Work on a big repo")})
    # 2 MiB the checkout must write, more than the disk will have.
    (bench.repo / "big.bin").write_bytes(os.urandom(2 << 20))
    git_as_tester(bench.repo, "add", "big.bin")
    git_as_tester(bench.repo, "commit", "-q", "-m", "a big file")
    bench.start()
    ballast = small_state_dir / "ballast"
    fill(ballast)
    leave_free(ballast, SHORT_BYTES)
    bench.post("big")
    first = bench.wait_run("R1", timeout=60)
    assert_queued_again_for_the_disk(first, small_state_dir)
    assert "the run's checkout could not be created: disk_full (" in first["reason"], first
    assert not (small_state_dir / "checkouts" / "R1").exists(), "the half-made checkout stayed"

    ballast.unlink()
    wait_until(lambda: bench.ticket("big")["state"] == "merged", timeout=120)
    runs = ticket_runs(bench, "big")
    assert runs[-1]["state"] == "merged", runs[-1]
    for run in runs[:-1]:
        assert_queued_again_for_the_disk(run, small_state_dir)
    assert query(bench.state_dir, "PRAGMA integrity_check") == [("ok",)]
