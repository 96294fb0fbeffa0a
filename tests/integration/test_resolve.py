"""Ways out of ``needs_review`` (issue 33): ``resolve`` by a person, or by the daemon
when someone merged the branch by hand.

0.8.0 had none: a needs_review run stayed in Needs attention for good, a branch merged by
hand too, and its ticket's waiting message read "terminal".
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest

from tests.support.agents import Bench, sloop_toml, ticket_text

# A flow without a merge stage: the run's branch awaits a person (needs_review).
REVIEW_ONLY = {"default": [{"name": "implement", "action": "agent"}]}
COMMITS = [
    "sh",
    "-c",
    'echo "$SLOOP_RUN $SLOOP_TICKET" > work.txt; git add work.txt; '
    'git commit -q -m "work of the agent"',
]


def needs_review(bench: Bench, *names: str, agent: list[str] | None = None) -> list[str]:
    bench.setup(
        sloop_toml(agent or COMMITS, flows=REVIEW_ONLY),
        {name: ticket_text(name.title()) for name in names},
    )
    bench.start()
    runs = []
    for name in names:
        bench.post(name)
        run = bench.wait_run(f"{name}#1", timeout=60)
        assert run["state"] == "needs_review", run
        assert run["resolution"] is None, run
        runs.append(run["id"])
    return runs


def error_of(bench: Bench, args: dict[str, Any]) -> dict[str, Any]:
    response = bench.client.call("resolve", args)
    assert response["ok"] is False, response
    assert isinstance(response["id"], str), response
    assert response["id"].startswith("t"), response
    error: dict[str, Any] = response["error"]
    return error


def test_a_person_resolves_a_run_as_merged_and_it_leaves_needs_attention(bench: Bench) -> None:
    (rid,) = needs_review(bench, "fix")
    before = bench.dashboard()
    assert [r["id"] for r in before["attention"]] == [rid]
    assert before["attention_total"] == 1
    waiting = bench.ticket("fix")["waiting"]
    assert waiting["reason"] == "terminal"  # a closed set in v1
    assert "sloopctl resolve fix --merged or --dismissed" in waiting["message"], waiting
    assert "sloopctl run fix" in waiting["message"], waiting

    data = bench.ok(
        "resolve", {"run": rid, "resolution": "merged", "reason": "merged in #41", "by": "alice"}
    )
    run, ticket = data["run"], data["ticket"]
    assert run["id"] == rid
    assert run["state"] == "needs_review"  # the state stays: run states are a closed set
    resolution = run["resolution"]
    assert resolution["resolution"] == "merged"
    assert resolution["by"] == "alice"
    assert resolution["reason"] == "merged in #41"
    assert resolution["auto"] is False
    assert isinstance(resolution["at_ms"], int)
    assert ticket["state"] == "merged"
    assert ticket["waiting"]["reason"] == "terminal"

    after = bench.dashboard()
    assert after["attention"] == []
    assert after["attention_total"] == 0
    # Everywhere a run row is shown, the resolution is on it.
    detail = bench.show_run(rid)
    assert detail is not None
    assert detail["resolution"] == resolution
    assert [r["resolution"] for r in after["recent"] if r["id"] == rid] == [resolution]
    assert "run_resolved" in bench.event_kinds(rid)
    events = bench.ok("events", {"scope": rid})["events"]
    told = [e for e in events if e["kind"] == "run_resolved"]
    assert told[0]["data"] == {
        "resolution": "merged",
        "by": "alice",
        "reason": "merged in #41",
        "auto": False,
    }


def test_a_dismissed_run_fails_its_ticket_leaves_attention_and_can_run_again(
    bench: Bench,
) -> None:
    first, second = needs_review(bench, "one", "two")
    assert bench.dashboard()["attention_total"] == 2
    data = bench.ok("resolve", {"run": "one", "resolution": "dismissed"})  # a ticket's name
    assert data["run"]["id"] == first
    assert data["run"]["resolution"]["by"] is None
    assert data["ticket"]["state"] == "failed"
    board = bench.dashboard()
    assert [r["id"] for r in board["attention"]] == [second]
    assert board["attention_total"] == 1
    # The way on after a dismissal is the same as after a failure: run it again.
    bench.ok("run", {"ref": "one"})
    again = bench.wait_run("one#2", timeout=60)
    assert again["state"] == "needs_review"
    assert again["resolution"] is None
    assert {r["id"] for r in bench.dashboard()["attention"]} == {again["id"], second}


def test_resolve_refuses_what_it_cannot_resolve_with_structured_errors(bench: Bench) -> None:
    (rid,) = needs_review(bench, "fix")
    bench.ok("resolve", {"run": rid, "resolution": "dismissed", "reason": "moot"})
    again = error_of(bench, {"run": rid, "resolution": "merged"})
    assert again["code"] == "conflict", again
    assert again["details"]["resolution"]["resolution"] == "dismissed"
    assert error_of(bench, {"run": "R999", "resolution": "merged"})["code"] == "not_found"
    for bad in (
        {"run": rid},
        {"run": rid, "resolution": "accepted"},
        {"run": rid, "resolution": 1},
        {"run": rid, "resolution": "merged", "by": ["alice"]},
        {"run": rid, "resolution": "merged", "colour": "red"},
    ):
        assert error_of(bench, bad)["code"] == "invalid_arguments", bad
    # Nothing already stored moved: the first resolution stands.
    detail = bench.show_run(rid)
    assert detail is not None
    assert detail["resolution"]["resolution"] == "dismissed"
    assert detail["resolution"]["reason"] == "moot"
    assert bench.ticket("fix")["state"] == "failed"


def test_only_a_needs_review_run_is_resolved(bench: Bench) -> None:
    bench.setup(sloop_toml(COMMITS), {"fix": ticket_text("Fix")})  # the default flow merges
    bench.start()
    bench.post("fix")
    run = bench.wait_run("fix#1", timeout=60)
    assert run["state"] == "merged", run
    error = error_of(bench, {"run": run["id"], "resolution": "dismissed"})
    assert error["code"] == "conflict"
    assert "only a needs_review run" in error["message"]
    assert bench.ticket("fix")["state"] == "merged"


def test_hostile_words_are_kept_as_data(bench: Bench) -> None:
    (rid,) = needs_review(bench, "fix")
    words = "\x1b]0;owned\x07\x1b[31mred\x1b[0m\nsecond line " + "x" * 5000
    data = bench.ok("resolve", {"run": rid, "resolution": "merged", "reason": words, "by": words})
    resolution = data["run"]["resolution"]
    for said in (resolution["reason"], resolution["by"]):
        assert "\x1b" not in said
        assert "\x07" not in said
        assert "\n" not in said
        assert len(said) <= 1000
    assert resolution["reason"].startswith("red second line x")


def merge_by_hand(bench: Bench, branch: str) -> None:
    subprocess.run(
        ["git", "-C", str(bench.repo), "merge", "-q", "--no-edit", branch],
        check=True,
        capture_output=True,
    )


def wait_resolution(bench: Bench, rid: str, limit: float = 20.0) -> dict[str, Any] | None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        detail = bench.show_run(rid)
        assert detail is not None
        if detail["resolution"] is not None:
            found: dict[str, Any] = detail["resolution"]
            return found
        time.sleep(0.2)
    return None


def test_a_branch_merged_by_hand_resolves_its_run(bench: Bench) -> None:
    first, second = needs_review(bench, "one", "two")
    branch = bench.show_run(first)["branch"]  # type: ignore[index]
    merge_by_hand(bench, branch)
    resolution = wait_resolution(bench, first)
    assert resolution is not None, "main holds the branch: the daemon resolves the run"
    assert resolution["resolution"] == "merged"
    assert resolution["auto"] is True
    assert resolution["by"] is None
    assert branch in resolution["reason"]
    assert bench.ticket("one")["state"] == "merged"
    assert [r["id"] for r in bench.dashboard()["attention"]] == [second]
    # The other run, whose branch main does not hold, is left to a person.
    assert bench.show_run(second)["resolution"] is None  # type: ignore[index]
    assert bench.ticket("two")["state"] == "needs_review"


@pytest.mark.parametrize("restart", [False, True])
def test_main_moving_without_the_branch_resolves_nothing(bench: Bench, restart: bool) -> None:
    (rid,) = needs_review(bench, "fix")
    bench.commit_on_main({"other.txt": "unrelated\n"})
    if restart:  # the daemon looks once when it starts, and keeps the resolutions it made
        bench.stop()
        bench.start()
    assert wait_resolution(bench, rid, limit=5.0) is None
    assert bench.ticket("fix")["state"] == "needs_review"


def test_a_resolution_survives_a_restart(bench: Bench) -> None:
    (rid,) = needs_review(bench, "fix")
    bench.ok("resolve", {"run": rid, "resolution": "merged", "by": "alice"})
    bench.stop()
    bench.start()
    detail = bench.show_run(rid)
    assert detail is not None
    assert detail["resolution"]["by"] == "alice"
    assert bench.dashboard()["attention_total"] == 0


def test_a_resolution_is_told_to_the_webhooks_that_listen_for_it(bench: Bench) -> None:
    from tests.support.receiver import Receiver

    told = Receiver()
    try:
        table = f'[[notify]]\nurl = "{told.url}"\non = ["resolved"]\nformat = "slack"\n'
        bench.setup(
            sloop_toml(COMMITS, flows=REVIEW_ONLY, extra=table), {"fix": ticket_text("Fix")}
        )
        bench.start()
        bench.post("fix")
        run = bench.wait_run("fix#1", timeout=60)
        assert run["state"] == "needs_review"
        time.sleep(0.5)
        assert told.requests() == []  # it listens for resolutions only
        bench.ok(
            "resolve", {"run": run["id"], "resolution": "dismissed", "reason": "moot", "by": "al"}
        )
        (request,) = told.wait_for(1)
        body = request.json()
        assert body["text"] == f"fix#1 ({run['id']}) resolved: dismissed (by al): moot", body
    finally:
        told.close()
