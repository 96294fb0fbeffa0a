"""Reviewer panels and reported stages, walked by the real daemon (DESIGN "The walk").

Seats run one after another, each under its own credential minted for
``(run, stage, attempt, reviewer index)``; the probing agents of
``tests.support.agents`` record what their seat could do (brief, note, one
verdict) and what a stale seat token could not.  One daemon runs three flows
in parallel: a 3-seat panel with quorum 2 that passes (pass, fail, pass)
behind a reported stage, one that fails (pass, silent, fail), and a reported
stage whose worker never reports (run twice: the second attempt may not
``show`` the first).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.agents import (
    Bench,
    install_probe,
    probe_argv,
    read_json,
    sloop_toml,
    stage_table,
    ticket_text,
)

UNAUTHORIZED = {"code": "unauthorized", "message": "not authorized", "details": {}}
# usage: additive in 0.6.0, the seat's own; interrupted: 0.9.0, sittings a stop cut short.
REVIEWER_KEYS = frozenset(
    {"reviewer", "target", "verdict", "confidence", "reason", "usage", "node", "interrupted"}
)


def seats_of(stage_row: dict[str, Any]) -> list[dict[str, Any]]:
    """A panel's seats without their usage (these agents print no usage stream) and
    the node they ran on (null here; a Ray node's in the Ray run)."""
    assert all(seat["usage"] is None for seat in stage_row["reviewers"]), stage_row
    assert all(seat["interrupted"] == [] for seat in stage_row["reviewers"]), stage_row
    return [
        {k: v for k, v in seat.items() if k not in ("usage", "node", "interrupted")}
        for seat in stage_row["reviewers"]
    ]


@pytest.fixture
def bench(bench: Bench) -> Bench:
    """The shared bench, with the probe agent installed."""
    install_probe(bench)
    return bench


def req(key: str, verb: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"do": "req", "key": key, "verb": verb, "args": args or {}, **extra}


def ctl(key: str, *argv: str) -> dict[str, Any]:
    return {"do": "ctl", "key": key, "argv": list(argv)}


def error_of(answer: dict[str, Any]) -> dict[str, Any]:
    assert set(answer) == {"id", "ok", "error"}, answer
    assert answer["ok"] is False, answer
    error: dict[str, Any] = answer["error"]
    return error


def data_of(answer: dict[str, Any]) -> Any:
    assert answer.get("ok") is True, answer
    return answer["data"]


def ctl_data(seen: dict[str, Any]) -> Any:
    assert seen["rc"] == 0, seen
    return data_of(seen["json"])


def recorded(bench: Bench, run: dict[str, Any], name: str) -> dict[str, Any]:
    """What a probe of ``run`` recorded in ``name``; the run and its output if nothing."""
    path = bench.path(name)
    if not path.exists():
        raise AssertionError(f"{name} is missing; {run}\n{bench.log_lines(run['id'])}")
    seen: dict[str, Any] = read_json(path)
    return seen


def panel(
    bench: Bench, name: str, seats: list[list[dict[str, Any]]], quorum: int
) -> dict[str, Any]:
    """An agent stage judged by a panel; seat ``i`` records into ``<name>-seat<i>.json``."""
    targets = ("claude", "codex", "gemini")
    reviewers = [
        {
            "target": targets[i],
            "command": probe_argv(bench, bench.flag(f"{name}-seat{i}.json"), steps),
        }
        for i, steps in enumerate(seats)
    ]
    return {
        "name": "review",
        "action": "agent",
        "result_check": "panel",
        "quorum": quorum,
        "reviewers": reviewers,
    }


def reported(bench: Bench, name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    command = probe_argv(bench, bench.flag(f"{name}-self-{{run}}.json"), steps)
    return {"name": "self", "action": "agent", "result_check": "reported", "command": command}


def quorum_seats(bench: Bench) -> list[list[dict[str, Any]]]:
    """pass, fail, pass; seat 1 first tries seat 0's token, which died when seat 1 started."""
    stale = "file:" + bench.flag("seat0-token")
    seats = [
        [
            ctl("brief", "brief"),
            {"do": "save", "what": "token", "path": bench.flag("seat0-token")},
            ctl("note", "note", "seat zero looked"),
            ctl("verdict", "verdict", "pass", "--reason", "fine", "--confidence", "high"),
            req("again", "verdict", {"verdict": "fail", "reason": "second thoughts"}),
        ],
        [
            req("stale_brief", "brief", token=stale),
            req("stale_note", "note", {"text": "forged"}, token=stale),
            req("stale_verdict", "verdict", {"verdict": "fail", "reason": "forged"}, token=stale),
            req("no_reason", "verdict", {"verdict": "fail"}),
            req("empty_reason", "verdict", {"verdict": "fail", "reason": ""}),
            req("float", "verdict", {"verdict": "fail", "reason": "r", "confidence": 0.9}),
            ctl("brief", "brief"),
            ctl("verdict", "verdict", "fail", "--reason", "missing tests", "--confidence", "low"),
            req("again", "verdict", {"verdict": "pass", "reason": "changed my mind"}),
            req("note", "note", {"text": "seat one looked"}),
        ],
        [
            ctl("brief", "brief"),
            req("verdict", "verdict", {"verdict": "pass", "reason": "ok"}),
        ],
    ]
    first: list[dict[str, Any]] = [{"do": "stamp", "key": "began"}, {"do": "env", "key": "env"}]
    return [[*first, *steps, {"do": "stamp", "key": "ended"}] for steps in seats]


def split_seats() -> list[list[dict[str, Any]]]:
    """pass, silent (exits 0 without a verdict), fail."""
    return [
        [req("verdict", "verdict", {"verdict": "pass", "reason": "good"})],
        [req("brief", "brief")],
        [req("verdict", "verdict", {"verdict": "fail", "reason": "bad", "confidence": "high"})],
    ]


@pytest.mark.on_ray
def test_panels_and_reported_stages(bench: Bench) -> None:
    flows = {
        "quorum": [
            reported(
                bench,
                "quorum",
                [ctl("brief", "brief"), ctl("verdict", "verdict", "pass", "--reason", "self")],
            ),
            panel(bench, "quorum", quorum_seats(bench), quorum=2),
        ],
        "split": [panel(bench, "split", split_seats(), quorum=2)],
        "mute": [reported(bench, "mute", mute_steps())],
    }
    bench.setup(
        sloop_toml(bench.argv(), parallel=3, flows=flows),
        {
            "quorum": ticket_text("Quorum", "Reviewed by three.", flow="quorum"),
            "split": ticket_text("Split", "Reviewers disagree.", flow="split"),
            "mute": ticket_text("Mute", "Says nothing.", flow="mute"),
        },
    )
    bench.start()
    for name in ("quorum", "split", "mute"):
        bench.post(name)
    first_mute = bench.wait_run("mute#1")
    bench.ok("run", {"ref": "mute"})  # a second attempt, to look back at the first
    runs = {name: bench.wait_run(f"{name}#1") for name in ("quorum", "split")}

    check_quorum(bench, runs["quorum"])
    check_split(bench, runs["split"])
    check_mute(bench, first_mute, bench.wait_run("mute#2"))
    dashboard = bench.dashboard()
    assert dashboard["runs"] == []
    assert dashboard["queued_triggers"] == []
    assert dashboard["tickets"] == []  # all three are terminal
    states = {name: bench.ticket(name)["state"] for name in ("quorum", "split", "mute")}
    assert states == {"quorum": "needs_review", "split": "failed", "mute": "failed"}


def check_quorum(bench: Bench, run: dict[str, Any]) -> None:
    seats = [recorded(bench, run, f"quorum-seat{i}.json") for i in range(3)]
    own = recorded(bench, run, f"quorum-self-{run['id']}.json")

    # One seat after another, each under its own token, on the run's one socket.
    assert seats[0]["ended"] <= seats[1]["began"] <= seats[1]["ended"] <= seats[2]["began"]
    envs = [seat["env"] for seat in seats]
    assert len({env["SLOOP_TOKEN"] for env in envs}) == 3
    assert {(env["SLOOP_RUN"], env["SLOOP_STAGE"], env["SLOOP_ATTEMPT"]) for env in envs} == {
        (run["id"], "review", "1")
    }
    # Each seat sees its run's worker socket at the same place in its sandbox.
    assert {env["SLOOP_SOCKET"] for env in envs} == {"/sloop/worker.sock"}
    assert all(env["socket_mode"] == "0o600" for env in envs)

    # Every seat reads the same brief; the reported stage before them reads its own.
    briefs = [ctl_data(seat["brief"]) for seat in seats]
    assert briefs[0] == briefs[1] == briefs[2]
    brief = briefs[0]
    assert brief["stage"] == {"name": "review", "attempt": 1, "result_check": "panel"}
    assert "acceptance" not in brief["ticket"]
    self_brief = ctl_data(own["brief"])
    assert self_brief["stage"] == {"name": "self", "attempt": 1, "result_check": "reported"}
    assert self_brief["definition_of_done"] != brief["definition_of_done"]
    for done in (brief["definition_of_done"], self_brief["definition_of_done"]):
        assert done
        assert all(isinstance(line, str) for line in done)
    unstaged = ("stage", "definition_of_done")
    assert {k: v for k, v in brief.items() if k not in unstaged} == {
        k: v for k, v in self_brief.items() if k not in unstaged
    }
    assert ctl_data(own["verdict"])["verdict"]["stage"] == "self"

    # Seat 0: its note and verdict carry its reviewer index; one report per seat.
    note = ctl_data(seats[0]["note"])["note"]
    assert set(note) == {"run", "stage", "attempt", "text", "at_ms", "reviewer"}
    assert (note["run"], note["stage"], note["reviewer"]) == (run["id"], "review", 0)
    assert ctl_data(seats[0]["verdict"]) == {
        "verdict": {
            "run": run["id"],
            "stage": "review",
            "reviewer": 0,
            "verdict": "pass",
            "confidence": "high",
            "reason": "fine",
        }
    }
    assert error_of(seats[0]["again"])["code"] == "conflict"

    # Seat 1: seat 0's token died when seat 1's was minted; its own works once.
    for key in ("stale_brief", "stale_note", "stale_verdict"):
        assert error_of(seats[1][key]) == UNAUTHORIZED, seats[1][key]
    for key in ("no_reason", "empty_reason", "float"):
        assert error_of(seats[1][key])["code"] == "invalid_arguments", seats[1][key]
    verdict = ctl_data(seats[1]["verdict"])["verdict"]
    assert (verdict["reviewer"], verdict["verdict"], verdict["confidence"]) == (1, "fail", "low")
    assert error_of(seats[1]["again"])["code"] == "conflict"
    assert data_of(seats[1]["note"])["note"]["reviewer"] == 1
    seat2 = data_of(seats[2]["verdict"])["verdict"]
    assert (seat2["reviewer"], seat2["confidence"], seat2["reason"]) == (2, "medium", "ok")

    # Two of three passed: the stage passed on the panel's word; the flow has no merge.
    assert run["state"] == "needs_review", run
    assert run["halt"] is None, run
    assert stage_table(run) == [("self", 1, "passed"), ("review", 1, "passed")]
    self_row, review = run["stages"]
    assert self_row["verdict_source"] == "reported"
    assert self_row["reason"] == "self"
    assert self_row["confidence"] == "medium"
    assert self_row["reviewers"] == []
    assert review["verdict_source"] == "panel"
    assert review["confidence"] is None
    assert review["exit_code"] is None, review
    assert all(set(r) == REVIEWER_KEYS for r in review["reviewers"])
    assert seats_of(review) == [
        {
            "reviewer": 0,
            "target": "claude",
            "verdict": "pass",
            "confidence": "high",
            "reason": "fine",
        },
        {
            "reviewer": 1,
            "target": "codex",
            "verdict": "fail",
            "confidence": "low",
            "reason": "missing tests",
        },
        {
            "reviewer": 2,
            "target": "gemini",
            "verdict": "pass",
            "confidence": "medium",
            "reason": "ok",
        },
    ]
    # Notes: seat 0's and seat 1's; the forged one left no trace.
    assert [(n["stage"], n["reviewer"], n["text"]) for n in run["notes"]] == [
        ("review", 0, "seat zero looked"),
        ("review", 1, "seat one looked"),
    ]
    logs = bench.ok("logs", {"run": run["id"], "stage": "review"})
    assert [r["text"] for r in logs["records"] if r["stream"] == "note"] == [
        "seat zero looked",
        "seat one looked",
    ]


def check_split(bench: Bench, run: dict[str, Any]) -> None:
    seats = [recorded(bench, run, f"split-seat{i}.json") for i in range(3)]
    assert data_of(seats[0]["verdict"])["verdict"]["verdict"] == "pass"
    assert data_of(seats[1]["brief"])["stage"]["result_check"] == "panel"
    assert data_of(seats[2]["verdict"])["verdict"]["confidence"] == "high"
    # One pass of three is below quorum 2: the stage fails, and with it the run.
    assert run["state"] == "failed", run
    assert run["halt"] == "fail_action", run
    assert stage_table(run) == [("review", 1, "failed")]
    review = run["stages"][0]
    assert review["verdict_source"] == "panel"
    assert seats_of(review) == [
        {
            "reviewer": 0,
            "target": "claude",
            "verdict": "pass",
            "confidence": "medium",
            "reason": "good",
        },
        # The silent seat counts as a fail, with no confidence and no reason.
        {"reviewer": 1, "target": "codex", "verdict": "fail", "confidence": None, "reason": None},
        {
            "reviewer": 2,
            "target": "gemini",
            "verdict": "fail",
            "confidence": "high",
            "reason": "bad",
        },
    ]
    assert run["notes"] == []


def mute_steps() -> list[dict[str, Any]]:
    """A reported stage's worker that never reports; it looks at the ticket's first run."""
    return [
        req("brief", "brief"),
        req("note", "note", {"text": "bye"}),
        req("show_first", "show", {"ref": "mute#1"}),
        req("show_ticket", "show", {"ref": "mute"}),
    ]


def check_mute(bench: Bench, first: dict[str, Any], second: dict[str, Any]) -> None:
    for attempt, run in ((1, first), (2, second)):
        seen = recorded(bench, run, f"mute-self-{run['id']}.json")
        stage = {"name": "self", "attempt": 1, "result_check": "reported"}
        assert data_of(seen["brief"])["stage"] == stage
        assert data_of(seen["brief"])["branch"] == f"sloop/mute/{attempt}"
        assert data_of(seen["note"])["note"]["text"] == "bye"
        assert data_of(seen["show_ticket"])["value"]["name"] == "mute"
        # Exit 0 without a verdict: the stage fails, the verdict is "missing".
        assert run["state"] == "failed", run
        assert run["halt"] == "fail_action", run
        assert stage_table(run) == [("self", 1, "failed")]
        row = run["stages"][0]
        assert row["verdict_source"] == "missing"
        assert row["exit_code"] == 0
        assert row["confidence"] is None
        assert row["reviewers"] == []
        assert run["reason"], run
        assert "self" in run["reason"], run
        # A note is evidence, not a verdict.
        assert [n["text"] for n in run["notes"]] == ["bye"]
    # The first attempt was its own run; to the second it is another run of the ticket.
    seen_first = recorded(bench, first, f"mute-self-{first['id']}.json")
    assert data_of(seen_first["show_first"])["value"]["id"] == first["id"]
    seen_second = recorded(bench, second, f"mute-self-{second['id']}.json")
    assert error_of(seen_second["show_first"]) == UNAUTHORIZED
