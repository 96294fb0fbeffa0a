"""Issue 38 on Ray: a run whose stage was running on a node continues after a restart.

The issue's flow, through the real daemon and a real cluster: ``prepare`` (an agent
stage on the daemon's host that commits) → ``work`` (an agent stage on a worker node,
held on a flag, that commits) → ``sync`` → ``merge``.  The daemon is killed with
SIGKILL (its driver dies with it, and Ray ends the actors the driver owned) or stopped
with SIGTERM (the node stops the child, the driver exits) while ``work`` runs on its
node, then started again.  What must hold: nothing of the first execution of
``work`` outlives the daemon; the run continues (one run, the same id, alias and
attempt, merged, no abort, ``run_continued``); ``prepare`` executed once; ``work``'s
first execution ended ``interrupted`` (its relayed output kept) and a second one,
placed anew on a node, started from the same commit (prepare's) and passed; main
holds both stages' files.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_continue_runs import (
    assert_one_run_merged_with_prepare_once,
    dumps_of,
    rows_of,
)
from tests.ray.test_ray_faults import drivers_of, wait_for
from tests.support.agents import Bench, processes_with, sloop_toml, ticket_text
from tests.support.daemon import git, query
from tests.support.raycluster import RayCluster

SETTLE_S = 180.0
GONE_S = 60.0
pytestmark = pytest.mark.timeout(900)
FLOW = "fix"
# The cluster is known; only ``work`` asks for it (prepare stays on the daemon's host).
EXECUTOR = '[executor]\naddress = "{address}"\n'
# Every SLOOP_ATTEMPT's start commit, as its child saw it, in the flags folder.
HEAD = 'git rev-parse HEAD > "$0/$SLOOP_STAGE-head-$SLOOP_ATTEMPT"; exec "$@"'


def _setup(bench: Bench, cluster: RayCluster) -> None:
    prepare = bench.argv(
        "--env-dump",
        bench.flag("prepare-{run}-{attempt}.json"),
        "--write",
        "prepared-{run}.txt=prepared",
    )
    work = [
        "sh",
        "-c",
        HEAD,
        str(bench.path("")),
        *bench.argv(
            "--env-dump",
            bench.flag("work-{run}-{attempt}.json"),
            "--pidfile",
            bench.flag("work-{attempt}.pid"),
            "--say",
            "work {attempt} began",
            "--wait-for",
            bench.flag("go-work"),
            "--wait-limit",
            "600",
            "--write",
            "worked-{run}.txt=worked",
        ),
    ]
    flows: dict[str, list[dict[str, Any]]] = {
        FLOW: [
            {"name": "prepare", "action": "agent", "command": prepare, "backend": "local"},
            {"name": "work", "action": "agent", "command": work, "backend": "ray",
             "resources": {"custom": {"worker": 1}}},
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only"},
        ]
    }  # fmt: skip
    config = sloop_toml(bench.argv(), flows=flows, extra=EXECUTOR.format(address=cluster.address))
    bench.setup(config, {"t": ticket_text("Continue me on Ray", flow=FLOW)})


def _tag(bench: Bench, attempt: int) -> str:
    """The tag in the environment of ``work``'s execution ``attempt``'s agent."""
    path = bench.path(f"work-{attempt}.pid")
    try:
        text: str = wait_for(
            lambda: path.exists() and path.read_text().strip(),
            what=f"work's execution {attempt} on its node",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {bench.show_run('t#1')}\n{bench.log()[-6000:]}") from None
    return text.removeprefix("tag:")


def _work_running(bench: Bench, run_id: str, attempt: int) -> dict[str, Any]:
    """The run's detail once ``work``'s execution ``attempt`` runs on a node (its row
    names one once the child is placed); a run that settled first (aborted, say) fails
    the test at once, with its detail."""

    def seen() -> dict[str, Any] | None:
        shown = bench.show_run(run_id)
        if shown is None or shown["terminal"]:
            return shown
        rows = rows_of(shown, "work")
        on_node = [
            r for r in rows if r["attempt"] == attempt and r["state"] == "running" and r["node"]
        ]
        return shown if on_node else None

    what = f"work's execution {attempt} running on a node"
    try:
        shown: dict[str, Any] = wait_for(seen, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {bench.show_run(run_id)}\n{bench.log()[-6000:]}") from None
    assert not shown["terminal"], f"{what}: the run settled first: {shown}"
    return shown


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_a_run_whose_stage_ran_on_a_node_continues_after_a_restart(
    bench: Bench, ray_cluster: RayCluster, how: str
) -> None:
    _setup(bench, ray_cluster)
    bench.start()
    bench.post("t")
    run_id = _work_running(bench, "t#1", 1)["id"]
    first_tag = _tag(bench, 1)
    assert processes_with(f"AGENT_PID_TAG={first_tag}"), "work's agent runs on its node"
    said = ("work", 1, "stdout", "work 1 began")
    wait_for(lambda: said in bench.log_lines(run_id), what="the node's line in the run's logs")
    assert bench.daemon is not None
    if how == "kill9":
        bench.daemon.kill9()
    else:
        assert bench.stop() == 0, bench.log()

    # Nothing of the first execution outlives the daemon: its driver, its actor (Ray
    # ends a dead driver's actors) and the agent in its sandbox.
    def gone() -> bool:
        return not drivers_of(bench) and not processes_with(f"AGENT_PID_TAG={first_tag}")

    wait_for(gone, GONE_S, "the old driver and work's first agent gone")

    bench.start()
    _work_running(bench, run_id, 2)  # placed anew, on a node
    second_tag = _tag(bench, 2)
    assert second_tag != first_tag
    bench.release("go-work")
    run = bench.wait_run(run_id, timeout=SETTLE_S)

    prepared = assert_one_run_merged_with_prepare_once(bench, run, run_id)
    assert prepared["node"] is None  # prepare ran on the daemon's host
    # work: cut short once on its node, then run again on a node and passed.
    rows = rows_of(run, "work")
    assert [(r["attempt"], r["state"], r["ended_by"]) for r in rows] == [
        (1, "failed", "interrupted"),
        (2, "passed", None),
    ], rows
    first, second = rows
    assert first["reason"].startswith("interrupted: the daemon"), first
    assert second["node"] is not None, second
    if how == "sigterm":
        # A clean stop records where the execution it cut short ran.  (A crash cannot:
        # a child's node is stored with its end, so the crashed one's row shows none.)
        assert first["node"] is not None, first
    assert second["started_at_ms"] >= first["finished_at_ms"]
    assert len(dumps_of(bench, "work")) == 2
    # Both executions started from the same commit: prepare's.
    heads = [bench.path(f"work-head-{n}").read_text().strip() for n in (1, 2)]
    assert heads == [prepared["commit"]] * 2, (heads, prepared)
    tree = git(bench.repo, "ls-tree", "--name-only", "main").split()
    assert {f"prepared-{run_id}.txt", f"worked-{run_id}.txt"} <= set(tree), tree
    # The interrupted execution's relayed line is kept beside the second's.
    lines = bench.log_lines(run_id)
    assert said in lines, lines
    assert ("work", 2, "stdout", "work 2 began") in lines, lines
    kinds = bench.event_kinds(run_id)
    assert "run_continued" in kinds, kinds
    assert "run_aborted" not in kinds, kinds
    # The ticket was never queued again: one trigger claimed, by this run.
    assert bench.ticket("t")["state"] == "merged"
    assert query(bench.state_dir, "SELECT count(*) FROM triggers") == [(1,)]
