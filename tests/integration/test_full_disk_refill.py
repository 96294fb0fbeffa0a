"""A full disk that the daemon's own catching-up would fill again (issue 23, item 10).

The state directory is an 8 MiB tmpfs; the runs' checkouts live on it too, as they
do by default.  An agent prints 28,350 lines while the disk is full, then exits, and
space returns.  On 0.7.0 the records held in memory were more than the freed disk
could take: every retry of the one big batch failed (its rolled-back frames left the
WAL as large as the disk), the loss counts waited behind that batch and died with it,
and the run ended with 250 of the lines, no gap and no ``dropped`` record; the next
ticket's checkout could not be created (``No space left on device``); and a daemon
started on that disk died in ``_write_info`` with a traceback.  What must hold:

- every line the agent printed is stored or counted in a ``dropped`` record, cursors
  have no gap, however often the store refused in between;
- catching up leaves the disk usable: the next ticket's run gets its checkout and
  merges;
- ``sloopd serve`` on a full disk exits with status 75 (EX_TEMPFAIL) and one line that
  names the state directory and the fix, no traceback, and serves once space returns;
  so does one whose up-front check passes but whose first new file finds no room (no
  inode left), which is where 0.7.0's traceback came from.

Skipped, with the reason, where mounting a tmpfs is refused (not root).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import new_daemon, query, wait_until
from tests.support.disk import all_records, fill, small_tmpfs, use_up_inodes

LINES = 28_350
TMPFS_BYTES = 8 * 1024 * 1024
DISK_FULL_EXIT = 75  # sysexits.h EX_TEMPFAIL: try again later (docs/operator-guide.md)

# Every run commits; the run named by argv[3] then waits for the test to fill the disk,
# floods, and exits at once (its stage ends while nothing can be recorded).
FLOODER = r"""
import os, subprocess, sys
flags, lines, flooding = sys.argv[1], int(sys.argv[2]), sys.argv[3]
run = os.environ["SLOOP_RUN"]
with open(f"work-{run}.txt", "w") as f:
    f.write("work\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", run],
               check=True)
if run == flooding:
    import time
    open(os.path.join(flags, "committed"), "w").close()
    while not os.path.exists(os.path.join(flags, "flood")):
        time.sleep(0.02)
    for n in range(lines):
        print(f"line {n:06d} " + "x" * 60, flush=(n % 200 == 0))
    sys.stdout.flush()
    open(os.path.join(flags, "flooded"), "w").close()
"""


@pytest.fixture
def small_state_dir(bench: Bench) -> Iterator[Path]:
    with small_tmpfs(bench, TMPFS_BYTES) as state:
        yield state


def flooding_bench(bench: Bench, flooding: str | None) -> None:
    """Tickets ``flood`` and ``next``; the run ``flooding`` (a run id) floods."""
    flooder = bench.root / "agents" / "flooder.py"
    flooder.write_text(FLOODER)
    flags = str(bench.root / "flags")
    agent = [bench.argv()[0], str(flooder), flags, str(LINES), flooding or "-"]
    tickets = {"flood": ticket_text("Flood on a full disk"), "next": ticket_text("Run after")}
    bench.setup(sloop_toml(agent), tickets)


def test_lines_dropped_while_the_disk_refills_are_counted_and_the_next_run_has_room(
    bench: Bench, small_state_dir: Path
) -> None:
    flooding_bench(bench, "R1")
    bench.start()
    bench.post("flood")
    wait_until(lambda: bench.path("committed").exists(), timeout=30)
    ballast = small_state_dir / "ballast"
    fill(ballast)
    bench.release("flood")
    wait_until(lambda: bench.path("flooded").exists(), timeout=60)
    wait_until(lambda: bench.dashboard()["daemon"]["store_fault"] is not None, timeout=30)

    ballast.unlink()
    settled = bench.wait_run("R1", timeout=120)
    assert settled["terminal"], settled
    wait_until(lambda: bench.dashboard()["daemon"]["store_fault"] is None, timeout=30)

    records = all_records(bench, "R1")
    cursors = [int(r["cursor"]) for r in records]
    assert cursors == list(range(1, len(cursors) + 1)), "a cursor gap"
    stored = [r for r in records if r["stream"] == "stdout" and r["text"].startswith("line ")]
    losses = [r for r in records if r.get("dropped", {}).get("cause") == "store"]
    dropped = sum(r["dropped"]["streams"].get("stdout", 0) for r in losses)
    assert len(stored) + dropped == LINES, (len(stored), dropped)
    assert losses, "the disk was full while the agent printed, yet no loss is on record"
    numbers = [int(r["text"].split()[1]) for r in stored]
    assert numbers == sorted(numbers), "stored lines out of order"

    # What was caught up left room: the next run's checkout is created and it merges.
    bench.post("next")
    after = bench.wait_run("R2", timeout=60)
    assert after["state"] == "merged", (after["reason"], after["stages"])
    assert query(bench.state_dir, "PRAGMA integrity_check") == [("ok",)]


@pytest.mark.parametrize("before", ["stopped", "killed", "no_store_yet"])
def test_a_daemon_started_on_a_full_disk_refuses_in_one_line(
    bench: Bench, small_state_dir: Path, before: str
) -> None:
    """``killed``: the last daemon died holding its lock and daemon.json, as one that held
    records on a refilled disk may."""
    flooding_bench(bench, None)
    if before != "no_store_yet":
        bench.start()
        if before == "killed":
            assert bench.daemon is not None
            bench.daemon.kill9()
        else:
            assert bench.stop() == 0, bench.log()
    fill(small_state_dir / "ballast")

    daemon = new_daemon(bench.root, bench.repo)
    code, stdout, logged = daemon.run_to_exit(timeout=60)
    assert "Traceback" not in logged, logged
    assert code == DISK_FULL_EXIT, (code, logged)
    assert stdout == "", "a refused daemon printed a socket"
    said = [line for line in logged.splitlines() if "refusing to start" in line]
    assert len(said) == 1, logged
    assert str(small_state_dir) in said[0], said
    assert "free space" in said[0], said

    (small_state_dir / "ballast").unlink()
    bench.start()
    bench.post("next")
    assert bench.wait_run("R1")["state"] == "merged"


def test_a_start_whose_late_write_finds_no_room_refuses_in_one_line(bench: Bench) -> None:
    """Bytes are free but no inode is: the up-front check passes, and the first new file
    of start-up is refused (on 0.7.0 that was daemon.json, in ``_write_info``, with a
    traceback).  The last daemon was killed, so its store's files are all there."""
    flooding_bench(bench, None)
    with small_tmpfs(bench, TMPFS_BYTES, inodes=400) as state:
        bench.start()
        assert bench.daemon is not None
        bench.daemon.kill9()
        assert use_up_inodes(state / "inodes") > 0

        daemon = new_daemon(bench.root, bench.repo)
        code, stdout, logged = daemon.run_to_exit(timeout=60)
        assert "Traceback" not in logged, logged
        assert code == DISK_FULL_EXIT, (code, logged)
        assert stdout == ""
        said = [line for line in logged.splitlines() if "refusing to start" in line]
        assert len(said) == 1, logged
        assert str(state) in said[0], said
        assert not (state / "daemon.tmp").exists()

        shutil.rmtree(state / "inodes")
        bench.start()
        bench.post("next")
        assert bench.wait_run("R1")["state"] == "merged"
