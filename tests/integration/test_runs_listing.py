"""The settled runs a person still has to find (0.8.0, additive): the ``runs`` verb
(by state, a page at a time), the dashboard's ``attention`` (runs that left their
ticket failed or needs_review, whatever their age) and the pattern rung over titles.
"""

from __future__ import annotations

from typing import Any

from sloopd.wire import api
from tests.support.agents import Bench, sloop_toml, ticket_text

FLOWS = {
    # No merge stage: the run settles needs_review.
    "review": [{"name": "check", "action": "command", "command": ["true"]}],
    "broken": [{"name": "check", "action": "command", "command": ["false"]}],
}


def settle_all(bench: Bench) -> dict[str, dict[str, Any]]:
    names = {"r0": "review", "r1": "review", "r2": "review", "f0": "broken", "f1": "broken"}
    settled = {}
    for name in names:
        bench.post(name)
        settled[name] = bench.wait_run(f"{name}#1")
    bench.post("m0")
    settled["m0"] = bench.wait_run("m0#1")
    return settled


def setup(bench: Bench) -> dict[str, dict[str, Any]]:
    agent = bench.argv("--write", "out-{run}.txt=from {run}")
    tickets = {f"r{n}": ticket_text(f"Review {n}", flow="review") for n in range(3)}
    tickets.update({f"f{n}": ticket_text(f"Broken {n}", flow="broken") for n in range(2)})
    tickets["m0"] = ticket_text("Mergeable change")
    bench.setup(sloop_toml(agent, flows=FLOWS), tickets)
    bench.start()
    return settle_all(bench)


def test_runs_pages_the_settled_runs_by_state(bench: Bench) -> None:
    settled = setup(bench)
    assert [settled[n]["state"] for n in ("r0", "f0", "m0")] == [
        "needs_review",
        "failed",
        "merged",
    ]
    everything = bench.ok("runs")
    assert everything["total"] == 6
    assert everything["limit"] == api.DEFAULT_RUNS_PAGE
    assert everything["state"] is None
    assert everything["offset"] == 0
    # The dashboard's recent order: most recently finished first.
    finished = [run["finished_at_ms"] for run in everything["runs"]]
    assert finished == sorted(finished, reverse=True)
    assert everything["runs"][0]["id"] == settled["m0"]["id"]
    assert {run["id"] for run in everything["runs"]} == {run["id"] for run in settled.values()}
    assert all("usage" in run for run in everything["runs"])
    reviews = bench.ok("runs", {"state": "needs_review"})
    assert reviews["total"] == 3
    assert [run["state"] for run in reviews["runs"]] == ["needs_review"] * 3
    # Pages: two at a time, the last one short, nothing past the end.
    pages = [
        bench.ok("runs", {"state": "needs_review", "limit": 2, "offset": o}) for o in (0, 2, 4)
    ]
    assert [len(page["runs"]) for page in pages] == [2, 1, 0]
    assert {page["total"] for page in pages} == {3}
    paged = [run["id"] for page in pages for run in page["runs"]]
    assert paged == [run["id"] for run in reviews["runs"]]
    # A larger limit is cut, and says so.
    assert bench.ok("runs", {"limit": 10_000})["limit"] == api.MAX_RUNS_PAGE
    refused = bench.client.call("runs", {"state": "running"})
    assert refused["ok"] is False
    assert refused["error"]["code"] == "invalid_arguments"
    assert refused["error"]["details"]["field"] == "state"


def test_attention_keeps_each_failed_or_needs_review_tickets_latest_run(bench: Bench) -> None:
    settled = setup(bench)
    board = bench.dashboard()
    wanted = {settled[n]["id"] for n in ("r0", "r1", "r2", "f0", "f1")}
    assert {run["id"] for run in board["attention"]} == wanted
    assert board["attention_total"] == 5
    finished = [run["finished_at_ms"] for run in board["attention"]]
    assert finished == sorted(finished, reverse=True)
    # Run a failed ticket again: its new run replaces the old one, the count stays.
    bench.ok("run", {"ref": "f0"})
    again = bench.wait_run("f0#2")
    assert again["state"] == "failed"
    board = bench.dashboard()
    listed = {run["id"] for run in board["attention"]}
    assert again["id"] in listed
    assert settled["f0"]["id"] not in listed
    assert board["attention_total"] == 5
    assert settled["m0"]["id"] not in listed  # a merged run needs nobody


def test_the_pattern_rung_searches_titles(bench: Bench) -> None:
    setup(bench)
    found = bench.ok("show", {"ref": "mergeable"})
    assert found["kind"] == "matches"
    assert [ticket["name"] for ticket in found["tickets"]] == ["m0"]
    assert bench.ok("show", {"ref": "Broken [01]"})["total"] == 2
