"""The walk with stages on Ray worker nodes: where each ran, seats on two nodes, the work."""

from __future__ import annotations

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import git
from tests.support.raycluster import RayCluster

RAY = '[executor]\nbackend = "ray"\naddress = "{address}"\n'


def _config(bench: Bench, cluster: RayCluster, stages: list[dict[str, object]]) -> str:
    return sloop_toml(
        bench.argv(), flows={"default": stages}, extra=RAY.format(address=cluster.address)
    )


def test_every_stage_runs_on_a_worker_node_and_show_says_which(
    bench: Bench, ray_cluster: RayCluster
) -> None:
    stages: list[dict[str, object]] = [
        {"name": "implement", "action": "agent",
         "command": bench.argv("--write", "impl-{ticket}.txt=done"),
         "resources": {"custom": {"w1": 1}}},
        {"name": "test", "action": "command", "command": ["test", "-f", "impl-T1.txt"],
         "network": False, "resources": {"custom": {"w2": 1}}},
        {"name": "sync", "action": "sync"},
        {"name": "merge", "action": "ff_only"},
    ]  # fmt: skip
    bench.setup(_config(bench, ray_cluster, stages), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    run = bench.wait_run("R1", timeout=90)
    assert run["state"] == "merged", run
    rows = {row["stage"]: row for row in run["stages"]}
    implement, test = rows["implement"]["node"], rows["test"]["node"]
    assert implement is not None
    assert test is not None
    assert implement["id"] != test["id"], "each asked for its own node's resource"
    assert rows["sync"]["node"] is None  # the daemon's own git, on its host
    assert rows["merge"]["node"] is None
    # The work made on w1 came back as a bundle, was checked, and is what main holds.
    shown = git(bench.repo, "show", "main:impl-T1.txt")
    assert shown.strip() == "done"
    assert rows["implement"]["commit"] is not None
    assert git(bench.repo, "merge-base", "--is-ancestor", rows["implement"]["commit"], "main") == ""


def test_panel_seats_on_two_nodes_each_report_a_verdict(
    bench: Bench, ray_cluster: RayCluster
) -> None:
    verdict = ["sh", "-c", 'exec sloopctl verdict pass --reason "seat on $SLOOP_STAGE"']
    stages: list[dict[str, object]] = [
        {"name": "implement", "action": "agent", "command": bench.argv("--write", "a.txt=a")},
        {"name": "review", "action": "agent", "result_check": "panel", "reviewers": [
            {"target": "one", "command": verdict, "resources": {"custom": {"w1": 1}}},
            {"target": "two", "command": verdict, "resources": {"custom": {"w2": 1}}},
        ]},
        {"name": "sync", "action": "sync"},
        {"name": "merge", "action": "ff_only"},
    ]  # fmt: skip
    bench.setup(_config(bench, ray_cluster, stages), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    run = bench.wait_run("R1", timeout=120)
    assert run["state"] == "merged", run
    review = next(row for row in run["stages"] if row["stage"] == "review")
    seats = review["reviewers"]
    assert [seat["verdict"] for seat in seats] == ["pass", "pass"], seats
    assert seats[0]["node"]["id"] != seats[1]["node"]["id"], seats
