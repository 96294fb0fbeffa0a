"""The merge queue's main paths, quickly: the lead's own check while H1's suite grows.

Flow: implement (writes notes/<ticket>.txt) → sync → test (gate: fails while a file
``bad`` is in the tree) → merge.  Properties, not times: everything good merges, the
bad run does not, rebuilds spend no returns, main only moves to passed gates' commits.
"""

from __future__ import annotations

from typing import Any

from tests.support.agents import Bench, sloop_toml, start_with_args, ticket_text
from tests.support.daemon import free_loopback_port, git, metrics_sample

AGENT = [
    "sh",
    "-c",
    'mkdir -p notes && echo "$SLOOP_RUN" > "notes/$SLOOP_TICKET.txt" && '
    'if grep -q BADMARK "$SLOOP_PROMPT_FILE"; then echo x > bad; fi && '
    'git add -A && git commit -q -m "work of $SLOOP_TICKET"',
]


def flow(gate_seconds: float, *, mode: str = "merge") -> list[dict[str, Any]]:
    return [
        {"name": "implement", "action": "agent"},
        {"name": "sync", "action": "sync", "mode": mode},
        {
            "name": "test",
            "action": "command",
            "command": ["sh", "-c", f"sleep {gate_seconds}; test ! -e bad"],
            "network": False,
            "return_to": "implement",
            "returns": 1,
        },
        {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
    ]


def passed_gate_commits(bench: Bench, runs: list[dict[str, Any]]) -> set[str]:
    return {
        row["commit"]
        for run in runs
        for row in run["stages"]
        if row["stage"] == "test" and row["state"] == "passed"
    }


def main_history(bench: Bench) -> list[str]:
    return git(bench.repo, "log", "-g", "--format=%H", "refs/heads/main").split()


def test_a_queue_of_good_runs_all_merge_each_through_one_gate(bench: Bench) -> None:
    names = [f"t{i}" for i in range(6)]
    bench.setup(
        sloop_toml(AGENT, parallel=6, flows={"default": flow(1)}),
        {name: ticket_text(name) for name in names},
    )
    before = set(main_history(bench))
    bench.start()
    for name in names:
        bench.post(name)
    runs = [bench.wait_run(f"{name}#1", timeout=90) for name in names]
    assert [r["state"] for r in runs] == ["merged"] * 6, [r["reason"] for r in runs]
    gates = sum(1 for r in runs for s in r["stages"] if s["stage"] == "test")
    assert gates <= 9, gates
    for run in runs:
        merges = [s for s in run["stages"] if s["stage"] == "merge"]
        assert all(m["state"] == "passed" for m in merges), run["stages"]
    moved_to = [sha for sha in main_history(bench) if sha not in before]
    assert set(moved_to) <= passed_gate_commits(bench, runs)


def test_a_bad_run_mid_queue_costs_only_itself(bench: Bench) -> None:
    names = ["a", "b", "bad", "c", "d"]
    bench.setup(
        sloop_toml(AGENT, parallel=5, flows={"default": flow(1)}),
        {name: ticket_text(name, "BADMARK" if name == "bad" else "") for name in names},
    )
    before = set(main_history(bench))
    port = free_loopback_port()
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    for name in names:
        bench.post(name)
    runs = {name: bench.wait_run(f"{name}#1", timeout=120) for name in names}
    states = {name: run["state"] for name, run in runs.items() if name != "bad"}
    assert states == dict.fromkeys(["a", "b", "c", "d"], "merged"), {
        n: r["reason"] for n, r in runs.items()
    }
    # Its own gate failed: sent back to implement, whose agent then had nothing to commit.
    assert runs["bad"]["state"] in ("failed", "needs_review")
    for name, run in runs.items():
        gates = [s for s in run["stages"] if s["stage"] == "test"]
        assert len(gates) <= 2 if name != "bad" else True, gates
        for gate in gates:
            if gate.get("ended_by") == "rebuilt":
                assert gate["reason"].startswith("rebuilt: ")
    moved_to = [sha for sha in main_history(bench) if sha not in before]
    assert set(moved_to) <= passed_gate_commits(bench, list(runs.values()))
    assert not (bench.repo / "bad").exists()
    assert "bad" not in git(bench.repo, "ls-tree", "--name-only", "main").split()
    # The queue's metrics: four landings, each through one gate execution of its own
    # that counted (a cut-short one counts too), rebuilds by the bad run's leaving.
    assert metrics_sample(port, "sloop_merge_queue_depth") == 0
    assert metrics_sample(port, "sloop_merge_queue_wait_seconds_count") == 4
    assert metrics_sample(port, "sloop_merge_queue_gate_executions_count") == 4
    gates_counted = metrics_sample(port, "sloop_merge_queue_gate_executions_sum")
    assert gates_counted is not None
    assert 4 <= gates_counted <= 8
    rebuilds = metrics_sample(port, 'sloop_merge_queue_rebuilds_total{cause="left_failed"}')
    assert rebuilds is not None
    assert rebuilds == sum(
        1
        for run in runs.values()
        for s in run["stages"]
        if s["stage"] == "sync" and s["attempt"] == 2 and run["state"] == "merged"
    )
