"""Issue 36: warm actors on a real Ray cluster.

The driver keeps actors running between stages (``sloopd.remote.pool``): a stage
after another of the same resource shape runs on the same actor, and finds nothing of
the one before (no file in its HOME or room, no variable, no process: the first's
room is removed and its child and what it left running are dead before the actor is
handed on).  A pool actor killed under its stage makes that stage ``node_lost``
(transient), and the next stage runs on another actor.
"""

from __future__ import annotations

import os
import secrets
import signal
from pathlib import Path
from typing import Any

import pytest

from sloopd.core.instance import instance_id
from sloopd.remote.room import _key as room_key
from tests.ray.test_ray_faults import cmdline, ray_config, wait_for
from tests.support.agents import Bench, processes_with, ticket_text
from tests.support.raycluster import RayCluster

SETTLE_S = 180.0
pytestmark = pytest.mark.timeout(900)
SYNC = {"name": "sync", "action": "sync"}
MERGE = {"name": "merge", "action": "ff_only", "allow_empty": True}
ON_W1 = {"custom": {"w1": 1}}


def _tag(bench: Bench, name: str) -> str:
    path = bench.path(name)
    try:
        text: str = wait_for(lambda: path.exists() and path.read_text().strip(), what=name)
    except AssertionError as exc:
        runs = [bench.show_run(f"R{n}") for n in (1, 2, 3)]
        raise AssertionError(f"{exc}: {runs}\n{bench.log()[-4000:]}") from None
    return text.removeprefix("tag:")


def actor_of(bench: Bench, pidfile: str) -> int:
    """The ``StageRoom`` actor process an agent (by its pid file's tag) runs under."""
    tag = _tag(bench, pidfile)
    pids: list[int] = wait_for(
        lambda: processes_with(f"AGENT_PID_TAG={tag}"), what=f"{pidfile}'s agent"
    )
    pid = pids[0]
    while pid > 1:
        if "StageRoom" in cmdline(pid):
            return pid
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    raise AssertionError(f"{pidfile}'s agent runs under no StageRoom actor")


def _rooms(cluster: RayCluster, bench: Bench) -> list[str]:
    rooms = cluster.nodes["w1"].node_dir / room_key(instance_id(bench.state_dir)) / "rooms"
    return sorted(p.name for p in rooms.iterdir()) if rooms.is_dir() else []


def test_a_second_stage_on_the_same_warm_actor_finds_nothing_of_the_first(
    bench: Bench, ray_cluster: RayCluster
) -> None:
    flags = bench.root / "flags"
    # The agent's path must be in the child's argv: the sandbox shows what it names.
    left = f"LEFT_BY_FIRST_PROCESS={secrets.token_hex(8)}"  # a process it leaves running
    first = [
        "sh",
        "-c",
        'echo first > "$HOME/left-by-first"; echo first > left-by-first.txt; '
        f'export LEFT_BY_FIRST=yes; env {left} sleep 600 & exec "$@"',
        "sh",
        *bench.argv(
            "--pidfile", f"{flags}/first.pid", "--wait-for", f"{flags}/go1", "--wait-limit", "300"
        ),
    ]
    second = [
        "sh", "-c",
        f'{{ ls -a "$HOME"; echo ---; ls -a .; echo ---; env; }} > {flags}/second-saw.txt; '
        'exec "$@"',
        "sh", *bench.argv("--pidfile", f"{flags}/second.pid", "--wait-for", f"{flags}/go2",
                          "--wait-limit", "300"),
    ]  # fmt: skip
    stages: list[dict[str, Any]] = [
        {"name": "first", "action": "command", "command": first,
         "network": False, "resources": ON_W1},
        {"name": "second", "action": "command", "command": second,
         "network": False, "resources": ON_W1},
        SYNC, MERGE,
    ]  # fmt: skip
    bench.setup(ray_config(bench, ray_cluster, {"default": stages}), {"two": ticket_text("Two")})
    bench.start()
    bench.post("two")

    actor = actor_of(bench, "first.pid")
    assert processes_with(left), "the first stage left a process running"
    assert len(_rooms(ray_cluster, bench)) == 1
    bench.release("go1")

    assert actor_of(bench, "second.pid") == actor, "the second stage ran on the same actor"
    # Nothing of the first: its process is dead, its room gone, its files and variable
    # nowhere the second can see.
    assert processes_with(left) == []
    assert len(_rooms(ray_cluster, bench)) == 1, "only the second stage's room"
    home, work, env = bench.path("second-saw.txt").read_text().split("---\n")
    assert "left-by-first" not in home, home
    assert "left-by-first.txt" not in work, work
    assert "LEFT_BY_FIRST" not in env, env
    assert "SLOOP_STAGE=second" in env, env
    bench.release("go2")

    run = bench.wait_run("R1", timeout=SETTLE_S)
    assert run["state"] == "merged", run
    rows = {row["stage"]: row for row in run["stages"]}
    assert rows["first"]["node"] == rows["second"]["node"], rows
    wait_for(lambda: _rooms(ray_cluster, bench) == [], what="the second stage's room removed")


def test_a_killed_pool_actor_is_node_lost_and_the_next_stage_runs(
    bench: Bench, ray_cluster: RayCluster
) -> None:
    flags = bench.root / "flags"
    hold = {
        "name": "hold",
        "action": "command",
        "network": False,
        "resources": ON_W1,
        "command": bench.argv(
            "--pidfile",
            f"{flags}/{{run}}.pid",
            "--wait-for",
            f"{flags}/go-{{run}}",
            "--wait-limit",
            "300",
        ),
    }
    config = ray_config(
        bench, ray_cluster, {"default": [hold, SYNC, MERGE]},
        agent='transient_retries = 2\ntransient_backoff = "1h"\ntransient_backoff_max = "2h"',
    )  # fmt: skip
    tickets = {name: ticket_text(name.title()) for name in ("warmup", "killed", "after")}
    bench.setup(config, tickets)
    bench.start()

    # The first run leaves its actor in the pool; the second takes it, warm.
    bench.post("warmup")
    pooled = actor_of(bench, "R1.pid")
    bench.release("go-R1")
    assert bench.wait_run("R1", timeout=SETTLE_S)["state"] == "merged"
    bench.post("killed")
    actor = actor_of(bench, "R2.pid")
    assert actor == pooled, "the second run took the first one's actor from the pool"
    os.kill(actor, signal.SIGKILL)

    run = bench.wait_run("R2", timeout=SETTLE_S)
    assert run["state"] == "failed", run
    assert run["classification"] == "node_lost", run
    assert "the Ray node running the stage was lost" in run["stages"][0]["reason"], run
    assert "transient retry 1 of 2" in run["reason"], run
    assert bench.ticket("killed")["state"] == "ready"

    # The next stage runs, on an actor that is not the killed one.
    bench.post("after")
    runs = wait_for(lambda: bench.ticket("after")["runs"], what="the next ticket's run")
    after = runs[0]["id"]
    fresh = actor_of(bench, f"{after}.pid")
    assert fresh != actor
    bench.release(f"go-{after}")
    assert bench.wait_run(after, timeout=SETTLE_S)["state"] == "merged"
