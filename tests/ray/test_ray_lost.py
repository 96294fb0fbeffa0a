"""A child lost on its node, and a relay slowed on the way: judged by the node's account.

A node whose own waiting for its child fails reports that as the child's loss (its
``failure``), and the stage is ``node_lost`` (transient, queued again), not a plain
failure with a stand-in exit code of -9.  The stall clock of a child on a node is the
node's: a driver that relays nothing for seconds (here stopped with SIGSTOP, as a
loaded host delays it) does not make a chatty agent stalled, while a silent agent is
still stopped past ``stall_kill_after``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ray.test_ray_faults import drivers_of, ray_config, ticks, wait_for
from tests.support.agents import Bench, ticket_text
from tests.support.daemon import REPO_ROOT, short_tmpdir
from tests.support.raycluster import RayCluster

SETTLE_S = 180.0
pytestmark = pytest.mark.timeout(900)
SYNC = {"name": "sync", "action": "sync"}
MERGE = {"name": "merge", "action": "ff_only", "allow_empty": True}
LOSES = "the test's node lost track of its child"


@pytest.fixture
def lossy_node(ray_cluster: RayCluster) -> Iterator[str]:
    """A worker ``lossy`` whose Sloop loses every child it waits for: the same version,
    its ``LocalChild.end`` raising once the child exited, as a node whose process
    machinery failed would."""
    root = short_tmpdir()
    try:
        shutil.copytree(
            REPO_ROOT / "sloopd", root / "sloopd", ignore=shutil.ignore_patterns("__pycache__")
        )
        launch = root / "sloopd" / "proc" / "launchers.py"  # LocalChild.end
        text = launch.read_text(encoding="utf-8")
        marker = "        code = await self.child.wait()\n"
        assert text.count(marker) == 1
        launch.write_text(text.replace(marker, f"{marker}        raise OSError({LOSES!r})\n"))
        ray_cluster.start_worker("lossy", cpus=2, env={"PYTHONPATH": str(root)})
        try:
            ray_cluster.wait_for_workers(["w1", "w2", "lossy"])
            yield "lossy"
        finally:
            node = ray_cluster.nodes.pop("lossy", None)
            if node is not None:
                node.kill(signal.SIGTERM)
            ray_cluster.wait_for_workers(["w1", "w2"])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_child_its_node_lost_is_node_lost_and_queued_again(
    bench: Bench, ray_cluster: RayCluster, lossy_node: str
) -> None:
    stage = {"name": "test", "action": "command", "command": ["true"], "network": False,
             "resources": {"custom": {lossy_node: 1}}}  # fmt: skip
    config = ray_config(
        bench, ray_cluster, {"default": [stage, SYNC, MERGE]},
        agent='transient_retries = 2\ntransient_backoff = "1h"\ntransient_backoff_max = "2h"',
    )  # fmt: skip
    bench.setup(config, {"lossy": ticket_text("Lossy")})
    bench.start()
    bench.post("lossy")
    run = bench.wait_run("R1", timeout=SETTLE_S)
    assert run["state"] == "failed", run
    assert run["classification"] == "node_lost", run
    row = run["stages"][0]
    assert row["node"] is not None, row  # it ran there
    assert "the Ray node running the stage was lost: the node lost the child" in row["reason"]
    assert LOSES in row["reason"], row
    assert "killed by signal" not in row["reason"], row
    assert "transient retry 1 of 2" in run["reason"], run  # the cluster is up: one is spent
    ticket = bench.ticket("lossy")
    assert ticket["state"] == "ready", ticket
    assert ticket["trigger"] is not None, ticket


CHATTY = (
    "import time\nfor i in range(60):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.2)\n"
)
STALL = 'stall_after = "1s"\nstall_kill_after = "3s"'
RELAY_STOPPED_S = 8.0  # more than stall_kill_after, less than the relay's grace (30 s)


def test_a_relay_stopped_for_seconds_does_not_stall_a_chatty_agent_but_silence_does(
    bench: Bench, ray_cluster: RayCluster
) -> None:
    chatty: dict[str, Any] = {"name": "implement", "action": "agent",
                              "command": [sys.executable, "-c", CHATTY],
                              "resources": {"custom": {"w1": 1}}}  # fmt: skip
    quiet: dict[str, Any] = {"name": "implement", "action": "agent",
                             "command": bench.argv("--sleep", "120"),
                             "resources": {"custom": {"w2": 1}}}  # fmt: skip
    flows = {"chatty": [chatty, SYNC, MERGE], "quiet": [quiet, SYNC, MERGE]}
    config = ray_config(bench, ray_cluster, flows, agent=STALL, repo="parallel = 2")
    tickets = {"chatty": ticket_text("Chatty", flow="chatty"),
               "quiet": ticket_text("Quiet", flow="quiet")}  # fmt: skip
    bench.setup(config, tickets)
    bench.start()

    # The silent agent on a node is stopped as a stall, as on the daemon's host.
    bench.post("quiet")
    silent = bench.wait_run("quiet#1", timeout=SETTLE_S)
    assert silent["classification"] == "stalled", silent

    bench.post("chatty")
    wait_for(lambda: len(ticks(bench, "chatty#1")) >= 3, what="the chatty agent's first lines")
    drivers = drivers_of(bench)
    assert len(drivers) == 1, drivers
    # The daemon's own driver (its child, so this test's): stopped, it relays nothing.
    os.kill(drivers[0], signal.SIGSTOP)
    stalls: list[Any] = []
    try:
        end = time.monotonic() + RELAY_STOPPED_S
        while time.monotonic() < end:
            shown = bench.show_run("chatty#1")
            assert shown is not None
            stalls.append(shown["stall"])
            time.sleep(0.5)
    finally:
        os.kill(drivers[0], signal.SIGCONT)
    run = bench.wait_run("chatty#1", timeout=SETTLE_S)
    assert run["classification"] != "stalled", (run, stalls)
    assert run["stages"][0]["state"] == "passed", run
    assert stalls == [None] * len(stalls), stalls
    # Every line came, in order, none twice.
    assert ticks(bench, "chatty#1") == list(range(60))
