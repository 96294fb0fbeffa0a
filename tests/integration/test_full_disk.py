"""A full disk under the state directory: nothing is lost silently, nothing stays stuck.

The state directory is a small tmpfs.  An agent commits its work, then floods
output while a ballast file fills the tmpfs, and exits while the disk is still
full.  What must hold:

- while full: ``show`` answers (reads need no space), the dashboard names the
  store's fault, a write verb answers ``daemon_unavailable`` naming the store (never
  ``internal``), ``doctor`` fails its store check, and the run stays in flight (its
  stage result cannot be recorded yet) rather than being dropped;
- once space returns: the run settles by itself (merged), every line the agent
  printed is either stored or counted in a ``system`` record with ``dropped``
  (lines, bytes, from/to), cursors have no gap, the store passes
  ``integrity_check`` and the fault is cleared.

Skipped, with the reason, where mounting a tmpfs is refused (not root).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import Bench, printer_argv, sloop_toml, ticket_text
from tests.support.daemon import query, sloopctl_argv, sloopctl_env, wait_until
from tests.support.disk import all_records, fill, small_tmpfs
from tests.support.tickets import holding_write_lock

LINES = 30_000
TMPFS_BYTES = 24 * 1024 * 1024

FLOODER = r"""
import os, subprocess, sys, time
flags = sys.argv[1]
with open("work.txt", "w") as f:
    f.write("work\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "work"],
               check=True)
open(os.path.join(flags, "committed"), "w").close()
while not os.path.exists(os.path.join(flags, "flood")):
    time.sleep(0.02)
for n in range(int(sys.argv[2])):
    print(f"line {n:06d} " + "x" * 60, flush=(n % 200 == 0))
sys.stdout.flush()
open(os.path.join(flags, "flooded"), "w").close()
if sys.argv[3] == "wait":
    while not os.path.exists(os.path.join(flags, "exit")):
        time.sleep(0.02)
"""


@pytest.fixture
def small_state_dir(bench: Bench) -> Iterator[Path]:
    with small_tmpfs(bench, TMPFS_BYTES) as state:
        yield state


@pytest.mark.parametrize("agent_exits", ["after_space_returns", "while_full"])
def test_a_full_disk_loses_nothing_silently_and_the_run_settles(
    bench: Bench, small_state_dir: Path, agent_exits: str
) -> None:
    """``while_full``: the stage ends while nothing can be recorded; the run must not stay
    in flight once space returns (it may fail: its checkout, on the same disk, could not
    be read back), and its result and settle are retried until they are stored."""
    flooder = bench.root / "agents" / "flooder.py"
    flooder.write_text(FLOODER)
    wait = "wait" if agent_exits == "after_space_returns" else "exit"
    agent = [bench.argv()[0], str(flooder), str(bench.root / "flags"), str(LINES), wait]
    bench.setup(sloop_toml(agent), {"flood": ticket_text("Flood while the disk fills")})
    bench.start()
    bench.post("flood")
    wait_until(lambda: bench.path("committed").exists(), timeout=30)
    ballast = small_state_dir / "ballast"
    fill(ballast)
    bench.release("flood")
    wait_until(lambda: bench.path("flooded").exists(), timeout=60)

    # Full: reads answer, the fault is named, writes are refused cleanly, the run waits.
    def fault() -> Any:
        return bench.dashboard()["daemon"]["store_fault"]

    wait_until(lambda: fault() is not None, timeout=30)
    assert fault()["reason"] == "full", fault()
    refused = bench.client.call("pause", {"reason": "disk full"})
    assert not refused["ok"], refused
    assert refused["error"]["code"] == "daemon_unavailable", refused
    assert refused["error"]["details"]["store"].endswith("store.sqlite3"), refused
    assert bench.dashboard()["gate"]["state"] == "open", "a refused pause changed the gate"
    run = bench.show_run("R1")
    assert run is not None, run
    assert run["state"] == "running", run
    doctor = subprocess.run(
        sloopctl_argv(bench.daemon.socket, "doctor"),  # type: ignore[union-attr, arg-type]
        capture_output=True,
        text=True,
        env=sloopctl_env(),
        cwd=bench.repo,
        timeout=60,
    )
    assert "cannot write its store" in doctor.stdout + doctor.stderr, doctor.stdout

    # Space returns: the run settles by itself and the loss is on record.
    ballast.unlink()
    bench.release("exit")
    settled = bench.wait_run("R1", timeout=60)
    if agent_exits == "after_space_returns":
        assert settled["state"] == "merged", (settled["reason"], settled["stages"])
    else:
        assert settled["terminal"], settled
        assert settled["state"] == "merged" or settled["reason"], settled
    wait_until(lambda: fault() is None, timeout=10)
    records = all_records(bench, "R1")
    cursors = [int(r["cursor"]) for r in records]
    assert cursors == list(range(1, len(cursors) + 1)), "a cursor gap"
    stored = [r for r in records if r["stream"] == "stdout" and r["text"].startswith("line ")]
    losses = [r for r in records if r.get("dropped", {}).get("cause") == "store"]
    dropped = sum(r["dropped"]["streams"].get("stdout", 0) for r in losses)
    assert losses, "the disk filled but no loss was recorded"
    assert len(stored) + dropped == LINES, (len(stored), dropped)
    for loss in losses:
        assert loss["dropped"]["lines"] == sum(loss["dropped"]["streams"].values())
    for loss in losses:
        assert loss["dropped"]["from_ms"] <= loss["dropped"]["to_ms"]
        assert "not stored" in loss["text"]
    numbers = [int(r["text"].split()[1]) for r in stored]
    assert numbers == sorted(numbers), "stored lines out of order"
    assert query(bench.state_dir, "PRAGMA integrity_check") == [("ok",)]


def test_a_store_locked_elsewhere_stalls_no_client_and_loses_nothing(bench: Bench) -> None:
    """Another process holds the store's write lock (a backup, an operator's sqlite3
    shell) for 3 s while an agent prints: clients are answered at once (a write verb
    with ``daemon_unavailable``, reason ``busy``), and every line is stored after."""
    steps: list[dict[str, Any]] = [
        {"do": "touch", "path": str(bench.path("started"))},
        {"do": "wait", "path": str(bench.path("go"))},
        {"do": "lines", "text": "held {n}", "first": 1, "last": 2000},
    ]
    config = sloop_toml(
        printer_argv(bench, steps), flows={"default": [{"name": "implement", "action": "agent"}]}
    )
    bench.setup(config, {"locked": ticket_text("Print while the store is locked")})
    bench.start()
    bench.post("locked")
    wait_until(lambda: bench.path("started").exists(), timeout=30)
    with holding_write_lock(bench.state_dir):
        bench.release("go")
        time.sleep(0.5)
        # Answered while the lock is held (it is released only below): a daemon that
        # waited on the lock would hold both past the client's patience.  An order,
        # not a wall-clock bound a busy host fails.
        refused = bench.client.call("pause", {"reason": "locked"})
        shown = bench.client.call("show")
        assert shown["ok"], shown
        assert refused["error"]["code"] == "daemon_unavailable", refused
        assert refused["error"]["details"]["reason"] == "busy", refused
        time.sleep(2.5)
    run = bench.wait_run("R1")
    assert run["stages"][0]["state"] == "passed", run
    texts = [r["text"] for r in all_records(bench, "R1") if r["stream"] == "stdout"]
    assert texts == [f"held {n}" for n in range(1, 2001)]
    assert bench.dashboard()["daemon"]["store_fault"] is None
