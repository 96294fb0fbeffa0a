"""``logs`` and ``events`` through the real daemon, with agents that print known lines.

What is checked is what the protocol text promises ("Read or stream one run's
output", "Stream activity") and DESIGN "Wire shapes" pins: every selector form
and its errors, tails with ``elided``, cursors across a live run, a follower
(the real ``sloopctl logs -f``) that stops exactly at complete+terminal, the
capture rules (partial last line, invalid UTF-8, long lines split, notes and
system lines), and scoped events for each rung of the ladder with the cursor
advancing over what the scope filtered out.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.support.agents import Bench, printer_argv, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_start, wait_until

RECORD_KEYS = frozenset({"cursor", "ts_ms", "stage", "attempt", "stream", "text"})
EVENT_KEYS = frozenset({"cursor", "kind", "at_ms", "ticket", "run", "data"})
REPOSITORY_WIDE = frozenset({"daemon_started", "daemon_stopped", "gate_changed"})
NUMBERED = 150  # stdout lines per implement execution: more than one page of 100
LONG_LINE = 200 * 1024  # bytes; captured in pieces of at most 64 KiB
PIECE = 64 * 1024


def page_all(bench: Bench, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Every record ``args`` selects, paging by ``after`` until a page is complete."""
    records: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        page = bench.ok("logs", {**args, **({"after": after} if after else {})})
        assert set(page) >= {"records", "next_cursor", "complete", "elided", "terminal"}, page
        assert page["elided"] == 0
        assert len(page["records"]) <= 100
        records += page["records"]
        if not page["complete"]:
            # An incomplete page ends at its last record: the next page starts right after.
            assert page["next_cursor"] == page["records"][-1]["cursor"]
        after = page["next_cursor"]
        if page["complete"]:
            return records


def positions(records: list[dict[str, Any]]) -> list[int]:
    return [int(r["cursor"]) for r in records]


def of(records: list[dict[str, Any]], stage: str, attempt: int | None = None) -> list[Any]:
    return [
        r for r in records if r["stage"] == stage and (attempt is None or r["attempt"] == attempt)
    ]


def texts(records: list[dict[str, Any]], stream: str) -> list[str]:
    return [r["text"] for r in records if r["stream"] == stream]


# --- logs: selectors, capture, tails, errors ------------------------------------------


def loop_flow(bench: Bench) -> dict[str, list[dict[str, Any]]]:
    """implement (prints everything) → test, which fails once and returns to implement."""
    implement = printer_argv(
        bench,
        [
            {"do": "lines", "text": "out {stage}#{attempt} {n}", "first": 1, "last": NUMBERED},
            {"do": "lines", "stream": "stderr", "text": "err {attempt} {n}", "first": 1, "last": 3},
            {"do": "note", "text": "note from {stage}#{attempt}"},
            {"do": "bytes", "hex": b"bad \xff\xfe end\n".hex()},
            {"do": "long", "size": LONG_LINE},
            {"do": "touch", "path": bench.flag("impl-{attempt}")},
            {"do": "partial", "text": "partial {attempt} tail"},
        ],
    )
    test = bench.argv("--say", "test {attempt}", "--fail-unless", bench.flag("impl-2"))
    return {
        "default": [
            {"name": "implement", "action": "agent", "command": implement},
            {
                "name": "test",
                "action": "command",
                "command": test,
                "return_to": "implement",
                "returns": 1,
            },
        ]
    }


@pytest.mark.on_ray
def test_logs_selectors_capture_tails_and_errors(bench: Bench) -> None:
    bench.setup(sloop_toml(bench.argv(), flows=loop_flow(bench)), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    run = bench.wait_run("one#1")
    assert run["state"] == "needs_review", run
    executions = sorted((r["stage"], r["attempt"]) for r in run["stages"])
    assert executions == [("implement", 1), ("implement", 2), ("test", 1), ("test", 2)]

    # No selector: every record once, in position order, each with its stage and attempt.
    everything = page_all(bench, {"run": "R1"})
    assert len(everything) > 300
    assert positions(everything) == sorted(set(positions(everything)))
    for record in everything:
        assert set(record) >= RECORD_KEYS, record
        assert record["stream"] in ("stdout", "stderr", "note", "system"), record
        assert (record["stage"], record["attempt"]) in {
            ("implement", 1),
            ("implement", 2),
            ("test", 1),
            ("test", 2),
        }, record
    assert page_all(bench, {"run": "one#1"}) == everything  # the alias names the same run

    # A bare stage is every execution of it; stage#N is one execution.
    assert page_all(bench, {"run": "R1", "stage": "implement"}) == of(everything, "implement")
    assert {r["attempt"] for r in of(everything, "implement")} == {1, 2}
    for stage, attempt in (("implement", 1), ("implement", 2), ("test", 1), ("test", 2)):
        selected = page_all(bench, {"run": "R1", "stage": f"{stage}#{attempt}"})
        assert selected == of(everything, stage, attempt) != []
    assert page_all(bench, {"run": "R1", "stage": "test"}) == of(everything, "test")

    # An execution never reached is an empty, complete page.
    never = bench.ok("logs", {"run": "R1", "stage": "implement#9"})
    assert never["records"] == []
    assert never["complete"] is True
    assert never["elided"] == 0
    assert never["terminal"] is True

    # What one execution captured, per stream.
    first = of(everything, "implement", 1)
    numbered = [t for t in texts(first, "stdout") if t.startswith("out ")]
    assert numbered == [f"out implement#1 {n}" for n in range(1, NUMBERED + 1)]
    assert texts(first, "stderr") == ["err 1 1", "err 1 2", "err 1 3"]
    assert texts(first, "note") == ["note from implement#1"]
    assert "bad \ufffd\ufffd end" in texts(first, "stdout")  # replaced, not dropped
    pieces = [r for r in first if r.get("split")]
    assert len(pieces) == 4
    assert all(r["stream"] == "stdout" for r in pieces)
    assert all(len(r["text"].encode()) <= PIECE for r in pieces)
    assert "".join(r["text"] for r in pieces) == "x" * LONG_LINE
    assert texts(first, "stdout")[-1] == "partial 1 tail"  # kept without its newline
    system = texts(first, "system")
    assert system[0] == "stage 'implement' execution 1 started"
    assert system[-1] == "stage 'implement' execution 1 passed"
    assert first[0]["stream"] == "system"
    assert first[-1]["stream"] == "system"
    assert "stage 'test' execution 1 failed" in texts(of(everything, "test", 1), "system")[1]
    assert texts(of(everything, "test", 2), "stdout") == ["test 2"]
    assert everything[-1]["stream"] == "system"
    assert everything[-1]["text"].startswith("run settled needs_review")

    # Tails: the newest N matching records, the rest counted in elided.
    tail = bench.ok("logs", {"run": "R1", "tail": 10})
    assert tail["records"] == everything[-10:]
    assert tail["elided"] == len(everything) - 10
    assert tail["complete"] is True
    assert tail["terminal"] is True
    assert tail["next_cursor"] == everything[-1]["cursor"]
    for selector, expected in (
        ("implement", of(everything, "implement")),
        ("implement#1", first),
        ("test#2", of(everything, "test", 2)),
    ):
        page = bench.ok("logs", {"run": "R1", "stage": selector, "tail": 7})
        assert page["records"] == expected[-7:], selector
        assert page["elided"] == max(0, len(expected) - 7), selector
        assert page["next_cursor"] == everything[-1]["cursor"], selector
    whole = bench.ok("logs", {"run": "R1", "stage": "test#1", "tail": 10_000})
    assert whole["records"] == of(everything, "test", 1)
    assert whole["elided"] == 0

    # A tail after a cursor keeps the newest N of what follows the cursor; the cursor
    # may sit on a record of another stage.
    middle = everything[len(everything) // 2]["cursor"]
    in_test = of(everything, "test", 1)[0]["cursor"]
    cases: list[tuple[str, str | None]] = [
        (middle, None),
        (middle, "implement"),
        (in_test, "implement#2"),
    ]
    for after, stage_filter in cases:
        args: dict[str, Any] = {"run": "R1", "tail": 5, "after": after}
        selected = everything
        if stage_filter is not None:
            args["stage"] = stage_filter
            selected = page_all(bench, {"run": "R1", "stage": stage_filter})
        matching = [r for r in selected if int(r["cursor"]) > int(after)]
        page = bench.ok("logs", args)
        assert page["records"] == matching[-5:], args
        assert page["elided"] == len(matching) - 5, args

    # Every selector and argument error.
    for selector in ("implement#0", "implement#x", "implement#-1", "implement#", "nope", "nope#1"):
        error = bench.client.error("logs", {"run": "R1", "stage": selector})
        assert error["code"] == "invalid_arguments", (selector, error)
    for after in ("abc", "-1", "", "1.5", "9" * 40):
        error = bench.client.error("logs", {"run": "R1", "after": after})
        assert error["code"] == "invalid_arguments", (after, error)
    assert bench.client.error("logs", {"run": "R1", "stage": ""})["code"] == "invalid_arguments"
    assert bench.client.error("logs", {"run": "R1", "tail": 0})["code"] == "invalid_arguments"
    for unknown in ("R99", "one#7", "nothing"):
        assert bench.client.error("logs", {"run": unknown})["code"] == "not_found", unknown


# --- logs: a live run, followed ---------------------------------------------------


def cli_line(record: dict[str, Any]) -> str:
    """What ``sloopctl logs`` prints for a record (not on a terminal: no colour)."""
    return f"[{record['stage']}#{record['attempt']} {record['stream']}] {record['text']}"


@pytest.mark.on_ray
def test_cursors_across_a_live_run_and_followers_stop_at_complete_terminal(bench: Bench) -> None:
    printer = printer_argv(
        bench,
        [
            {"do": "lines", "text": "early {n}", "first": 1, "last": 40},
            {"do": "wait", "path": bench.flag("go")},
            {"do": "lines", "text": "late {n}", "first": 1, "last": 150, "every": 0.004},
            {"do": "lines", "stream": "stderr", "text": "late err {n}", "first": 1, "last": 5},
            {"do": "partial", "text": "no newline"},
        ],
    )
    flows = {"default": [{"name": "implement", "action": "agent", "command": printer}]}
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"live": ticket_text("Live")})
    bench.start()
    bench.post("live")

    def early_printed() -> bool:
        response = bench.client.call("logs", {"run": "live#1", "stage": "implement#1"})
        return response["ok"] and "early 40" in texts(response["data"]["records"], "stdout")

    wait_until(early_printed)
    # Read what is there while the agent waits: complete, but not terminal.
    collected: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = bench.ok("logs", {"run": "R1", **({"after": cursor} if cursor else {})})
        collected += page["records"]
        cursor = page["next_cursor"]
        if page["complete"]:
            assert page["terminal"] is False
            break
    assert texts(collected, "stdout") == [f"early {n}" for n in range(1, 41)]

    # Two real followers: everything, and one execution as JSON envelopes.
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    plain = sloopctl_start(bench.daemon.socket, "logs", "live#1", "-f")
    as_json = sloopctl_start(
        bench.daemon.socket, "--json", "logs", "R1", "--stage", "implement#1", "--follow"
    )
    try:
        time.sleep(0.5)
        assert plain.poll() is None
        assert as_json.poll() is None
        bench.release("go")

        # Follow from the cursor while the agent prints, to the first complete+terminal page.
        pages_while_printing = 0
        while True:
            page = bench.ok("logs", {"run": "R1", "after": cursor})
            collected += page["records"]
            if page["records"] and not page["terminal"]:
                pages_while_printing += 1
            if page["complete"] and page["terminal"]:
                break
            cursor = page["next_cursor"]
            if page["complete"]:
                time.sleep(0.01)
        plain_out, plain_err = plain.communicate(timeout=20)
        json_out, json_err = as_json.communicate(timeout=20)
    finally:
        for process in (plain, as_json):
            if process.poll() is None:
                process.kill()
                process.communicate()

    assert pages_while_printing >= 2, "the live run was never paged while it printed"
    everything = page_all(bench, {"run": "R1"})
    # Nothing lost, nothing twice, and the follower's last page held the settling line.
    assert collected == everything
    assert everything[-1]["stream"] == "system"
    assert everything[-1]["text"].startswith("run settled")
    stdout = texts(everything, "stdout")
    assert stdout == [
        *(f"early {n}" for n in range(1, 41)),
        *(f"late {n}" for n in range(1, 151)),
        "no newline",
    ]
    assert texts(everything, "stderr") == [f"late err {n}" for n in range(1, 6)]

    assert plain.returncode == 0, plain_err
    assert plain_out.splitlines() == [cli_line(r) for r in everything]
    assert plain_err == ""

    assert as_json.returncode == 0, json_err
    envelopes = [json.loads(line) for line in json_out.splitlines()]
    assert all(e["ok"] for e in envelopes)
    pages = [e["data"] for e in envelopes]
    assert [p["complete"] and p["terminal"] for p in pages] == [False] * (len(pages) - 1) + [True]
    assert [r for p in pages for r in p["records"]] == of(everything, "implement", 1)


# --- events -----------------------------------------------------------------------


def all_events(bench: Bench, **args: Any) -> tuple[list[dict[str, Any]], str]:
    """Every event ``args`` selects, paging until a page comes back empty; and the end cursor."""
    events: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        page = bench.ok("events", {**args, **({"after": after} if after else {})})
        assert set(page) == {"events", "next_cursor"}, page
        for event in page["events"]:
            assert set(event) == EVENT_KEYS, event
        if not page["events"]:
            assert after is None or page["next_cursor"] == after
            return events, page["next_cursor"]
        events += page["events"]
        after = page["next_cursor"]


def test_events_unscoped_tails_and_every_scope_rung(bench: Bench) -> None:
    quick = printer_argv(bench, [{"do": "lines", "text": "hi {n}", "first": 1, "last": 2}])
    flows = {"default": [{"name": "implement", "action": "agent", "command": quick}]}
    bench.setup(
        sloop_toml(bench.argv(), flows=flows, parallel=2),
        {
            "alpha-one": ticket_text("Alpha", project="alpha"),
            "beta-two": ticket_text("Beta", project="beta"),
        },
    )
    bench.start()
    alpha = bench.post("alpha-one")["ticket"]["id"]
    beta = bench.post("beta-two")["ticket"]["id"]
    alpha_run = bench.wait_run("alpha-one#1")["id"]
    beta_run = bench.wait_run("beta-two#1")["id"]
    wait_until(lambda: len(all_events(bench)[0]) >= 7)  # run_finished comes with the settling
    paused = bench.ok("pause", {"reason": "freeze"})["gate"]
    assert paused == {"state": "paused", "until_ms": None, "reason": "freeze"}
    assert bench.ok("resume")["gate"]["state"] == "open"

    feed, end = all_events(bench)
    assert positions(feed) == sorted(set(positions(feed)))
    assert feed[0]["kind"] == "daemon_started"
    for event in feed:
        if event["kind"] in REPOSITORY_WIDE:
            assert event["ticket"] is None, event
            assert event["run"] is None, event
    for ticket, run in ((alpha, alpha_run), (beta, beta_run)):
        kinds = [e["kind"] for e in feed if e["run"] == run]
        assert kinds == ["run_claimed", "run_started", "run_finished"]
        assert all(e["ticket"] == ticket for e in feed if e["run"] == run)
    finished = next(e for e in feed if e["kind"] == "run_finished" and e["run"] == alpha_run)
    assert finished["data"]["state"] == "needs_review"
    gates = [e for e in feed if e["kind"] == "gate_changed"]
    assert [(g["data"]["from"], g["data"]["state"]) for g in gates] == [
        ("open", "paused"),
        ("paused", "open"),
    ]
    assert end == feed[-1]["cursor"]

    # tail N: the newest N, with the feed's end as the next cursor.
    for n in (1, 3, len(feed) + 5):
        page = bench.ok("events", {"tail": n})
        assert page["events"] == feed[-n:]
        assert page["next_cursor"] == end

    # Every rung of the ladder; none ever shows a repository-wide event.
    of_alpha = [e for e in feed if e["ticket"] == alpha]
    of_beta = [e for e in feed if e["ticket"] == beta]
    scopes = {
        alpha: of_alpha,  # ticket id: the ticket and its runs
        alpha_run: [e for e in feed if e["run"] == alpha_run],  # run id
        "beta-two#1": [e for e in feed if e["run"] == beta_run],  # run alias
        "alpha-one": of_alpha,  # ticket name
        "tickets/beta-two.md": of_beta,  # ticket path
        "project:alpha": of_alpha,
        "project:beta": of_beta,
        "ONE": of_alpha,  # pattern rung: case-insensitive substring
        "^beta-": of_beta,  # pattern rung: regular expression
        "-(one|two)$": [e for e in feed if e["ticket"] in (alpha, beta)],
        "zzz-nothing": [],  # a valid pattern may match nothing
    }
    for scope, expected in scopes.items():
        got, scoped_end = all_events(bench, scope=scope)
        assert got == expected, scope
        assert not {e["kind"] for e in got} & REPOSITORY_WIDE, scope
        # The cursor went past every row the scope filtered out, up to the feed's end.
        assert scoped_end == end, scope
        first = bench.ok("events", {"scope": scope})
        assert first["next_cursor"] == end, scope
        if expected:
            page = bench.ok("events", {"scope": scope, "tail": 2})
            assert page["events"] == expected[-2:], scope
            assert page["next_cursor"] == end, scope
    nothing = bench.ok("events", {"scope": "zzz-nothing"})
    assert nothing == {"events": [], "next_cursor": end}

    for bad in ("(", "[a-", "a{2,1}"):
        assert bench.client.error("events", {"scope": bad})["code"] == "invalid_arguments", bad
    for after in ("x", "-3", ""):
        assert bench.client.error("events", {"after": after})["code"] == "invalid_arguments"
    assert bench.client.error("events", {"tail": 0})["code"] == "invalid_arguments"

    # Many unrelated events later, a scoped poll from its old cursor returns nothing
    # and a cursor past all of them; an unscoped poll pages through them.
    scoped_cursor = bench.ok("events", {"scope": alpha})["next_cursor"]
    for _ in range(60):
        bench.ok("pause")
        bench.ok("resume")
    later, new_end = all_events(bench)
    assert len(later) == len(feed) + 120
    assert int(new_end) > int(end)
    poll = bench.ok("events", {"scope": alpha, "after": scoped_cursor})
    assert poll == {"events": [], "next_cursor": new_end}
    unscoped = bench.ok("events", {"after": scoped_cursor})
    assert len(unscoped["events"]) == 100  # one page: the cursor stops at its last row
    assert unscoped["next_cursor"] == unscoped["events"][-1]["cursor"] != new_end

    # A scoped poll after more of the scope's own events returns exactly those.
    beta_cursor = bench.ok("events", {"scope": "beta-two"})["next_cursor"]
    bench.ok("run", {"ref": "beta-two"})
    rerun = bench.wait_run("beta-two#2")["id"]
    wait_until(
        lambda: (
            bench.ok("events", {"scope": rerun, "tail": 1})["events"][0]["kind"] == "run_finished"
        )
    )
    page = bench.ok("events", {"scope": "beta-two", "after": beta_cursor})
    assert [(e["run"], e["kind"]) for e in page["events"]] == [
        (rerun, "run_claimed"),
        (rerun, "run_started"),
        (rerun, "run_finished"),
    ]
    assert bench.ok("events", {"scope": alpha, "after": new_end})["events"] == []


def test_only_ascii_digits_make_cursors_and_attempts(bench: Bench) -> None:
    quick = printer_argv(bench, [{"do": "lines", "text": "hi {n}", "first": 1, "last": 2}])
    flows = {"default": [{"name": "implement", "action": "agent", "command": quick}]}
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    bench.wait_run("one#1")
    codes = [
        bench.client.call("logs", {"run": "R1", "after": "²"}),
        bench.client.call("logs", {"run": "R1", "after": "\u0661\u0662"}),
        bench.client.call("logs", {"run": "R1", "stage": "implement#²"}),
        bench.client.call("logs", {"run": "R1", "stage": "implement#\u0661"}),
        bench.client.call("events", {"after": "²"}),
        bench.client.call("events", {"after": "\u0661"}),
    ]
    assert [c.get("error", {}).get("code") for c in codes] == ["invalid_arguments"] * 6


def test_the_hot_page_answers_exactly_what_the_general_path_does(bench: Bench) -> None:
    """``logs {run, after}`` of a run already looked up skips the general checks
    (wire.dispatch's fast path): same bytes, same errors, same refusals."""
    printer = printer_argv(bench, [{"do": "lines", "text": "n {n}", "first": 1, "last": 250}])
    flows = {"default": [{"name": "implement", "action": "agent", "command": printer}]}
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    bench.wait_run("one#1")
    client = bench.client

    def raw(args: dict[str, Any], **envelope: Any) -> bytes:
        message = {"v": 1, "id": 7, "verb": "logs", "args": args, **envelope}
        client.send_raw(json.dumps(message).encode() + b"\n")
        return client.read_raw()

    for run in ("R1", "one#1"):
        for after in (None, "0", "17", "120", "250", "253", "999"):
            args: dict[str, Any] = {"run": run, **({"after": after} if after else {})}
            first = raw(args)  # the general path (it looks the run up)
            assert raw(args) == first, args  # the fast path
            # Explicit nulls and other argument sets go the general way: the same page.
            assert raw({**args, "stage": None, "tail": None}) == first, args
            assert raw({**args, "wait_ms": 0}) == first, args
            page = json.loads(first)["data"]
            assert page["terminal"] is True
            assert len(page["records"]) <= 100
    for after in ("abc", "", "-1", "1" * 19, "²"):
        reply = json.loads(raw({"run": "R1", "after": after}))
        assert reply["error"]["details"] == {"field": "after"}, after
    assert json.loads(raw({"run": "R1", "after": 5}))["error"]["details"]["field"] == "after"
    assert json.loads(raw({"run": "R1"}, token="x"))["error"]["code"] == "unauthorized"
    assert json.loads(raw({"run": "R1"}, v=2))["error"]["code"] == "unsupported_version"
    assert json.loads(raw({"run": "R1", "extra": 1}))["error"]["details"]["field"] == "extra"


def test_the_hot_page_of_a_live_run_answers_what_the_general_path_does(bench: Bench) -> None:
    """While the run goes on (not terminal), the hot page knows where the log ends from
    the log sink: its pages are those of the general path, byte for byte."""
    printer = printer_argv(
        bench,
        [
            {"do": "lines", "text": "n {n}", "first": 1, "last": 250},
            {"do": "wait", "path": bench.flag("finish")},
        ],
    )
    flows = {"default": [{"name": "implement", "action": "agent", "command": printer}]}
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    client = bench.client

    def raw(args: dict[str, Any]) -> bytes:
        message = {"v": 1, "id": "live", "verb": "logs", "args": args}
        client.send_raw(json.dumps(message).encode() + b"\n")
        return client.read_raw()

    def last_text() -> str | None:
        records = bench.ok("logs", {"run": "one#1", "tail": 1})["records"]
        return records[-1]["text"] if records else None

    wait_until(lambda: last_text() == "n 250", timeout=60)
    for after in (None, "0", "17", "120", "249", "250", "253"):
        args: dict[str, Any] = {"run": "one#1", **({"after": after} if after else {})}
        general = raw({**args, "stage": None})  # never the hot path
        assert raw(args) == general, after  # looked up above: the hot path
        page = json.loads(general)["data"]
        assert page["terminal"] is False
    bench.release("finish")
    bench.wait_run("one#1")
