"""Ways out of ``needs_review`` on the web view (issue 33), in a real headless Chromium
and the real gateway: "Merged by hand" and "Dismiss" (the operator verb ``resolve``,
asked first with a reason, as Abort is) and "Run again" (``run`` on the run's ticket),
on the run page and on each Needs attention row; a resolved run reads as resolved and
leaves Needs attention; held tickets are counted apart, not attention rows, and no
attention row is repeated under Tickets.

The operator socket here is scripted in the design's wire shapes
(/work/notes/issue33-design.md: ``resolve`` answers ``{"run", "ticket"}``, run rows
carry ``resolution``, a resolved run leaves ``attention``), and records what reaches it.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sloopctl.web.server import resolver
from tests.support.web import (
    chromium,
    console_errors,
    gateway,
    has_text,
    needs_browser,
    screenshot,
    text_of,
    wait_for,
)
from tests.unit.test_sloopctl_queue import NOW, stage
from tests.web.test_web_acting import dialog_open, verbs
from tests.web.test_web_gateway import post_action
from tests.web.test_web_queue import ScriptedDaemon

pytestmark = needs_browser

HELD = 24


def run_row(run: str, ticket: str, name: str, state: str, reason: str) -> dict[str, Any]:
    return {
        "id": run,
        "alias": f"{name}#1",
        "ticket": ticket,
        "attempt": 1,
        "state": state,
        "terminal": True,
        "reason": reason,
        "halt": None,
        "flow": "review",
        "branch": f"sloop/{name}-1",
        "claimed_at_ms": NOW - 300_000,
        "started_at_ms": NOW - 300_000,
        "finished_at_ms": NOW - 200_000,
        "agent_exit_code": 0,
        "usage": None,
        "stall": None,
        "diagnosis": None,
        "followed_by": None,
        "resolution": None,
        "notes": [],
        "queue": None,
        "stages": [
            stage("implement", 1, "passed", started_at_ms=NOW - 300_000,
                  finished_at_ms=NOW - 250_000, duration_ms=50_000, exit_code=0),
            stage("check", 1, "passed" if state == "needs_review" else "failed",
                  started_at_ms=NOW - 250_000, finished_at_ms=NOW - 200_000,
                  duration_ms=50_000, exit_code=0 if state == "needs_review" else 1),
        ],
    }  # fmt: skip


def ticket_row(tid: str, name: str, title: str, state: str) -> dict[str, Any]:
    waiting = {
        "needs_review": {"reason": "terminal", "message": "needs review"},
        "failed": {"reason": "terminal", "message": "failed"},
        "held": {"reason": "held", "message": "'ready' releases it"},
    }[state]
    return {"id": tid, "name": name, "title": title, "state": state, "waiting": waiting,
            "updated_at_ms": NOW - 100_000, "manual": False}  # fmt: skip


class World:
    """The scripted daemon's state: two needs_review runs, one failed, 24 held tickets."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs = {
            "R6": run_row("R6", "T6", "docs", "needs_review", "no merge stage: review it"),
            "R7": run_row("R7", "T7", "login", "needs_review", "no merge stage: review it"),
            "R8": run_row("R8", "T8", "broken", "failed", "stage 'check' failed"),
        }
        self.tickets = {
            "T6": ticket_row("T6", "docs", "Write the docs", "needs_review"),
            "T7": ticket_row("T7", "login", "Fix the login", "needs_review"),
            "T8": ticket_row("T8", "broken", "Cannot pass", "failed"),
        }
        for n in range(HELD):
            tid = f"T{100 + n}"
            self.tickets[tid] = ticket_row(tid, f"later-{n}", f"Later {n}", "held")
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def dashboard(self) -> dict[str, Any]:
        attention = [r for r in self.runs.values() if r["resolution"] is None]
        return {
            "kind": "dashboard",
            "daemon": {"version": "0.9.0", "pid": 1, "repo": "/srv/repo"},
            "gate": {"state": "open", "until_ms": None, "reason": None},
            "runs": [],
            "queued_triggers": [],
            "tickets": [t for t in self.tickets.values() if t["state"] != "merged"],
            "recent": list(self.runs.values()),
            "recent_total": len(self.runs),
            "attention": attention,
            "attention_total": len(attention),
        }

    def resolve(self, args: dict[str, Any]) -> Any:
        run = self.runs.get(args.get("run", ""))
        if run is None:
            return None, {"code": "not_found", "message": "no such run"}
        if run["state"] != "needs_review" or run["resolution"] is not None:
            return None, {"code": "conflict", "message": f"{run['id']} is not awaiting review"}
        run["resolution"] = {
            "resolution": args["resolution"],
            "by": args.get("by"),
            "reason": args.get("reason"),
            "at_ms": NOW,
            "auto": False,
        }
        ticket = self.tickets[run["ticket"]]
        ticket["state"] = "merged" if args["resolution"] == "merged" else "failed"
        return {"run": run, "ticket": ticket}, None

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        verb, args = request["verb"], request["args"]
        held = sorted({"wait_ms", "since"} & set(args))
        if held:
            details = {"field": held[-1]}
            refused = {
                "code": "invalid_arguments",
                "message": "unknown argument",
                "details": details,
            }
            return {"id": request["id"], "ok": False, "error": refused}
        data: Any = None
        error: Any = None
        with self.lock:
            if verb in ("resolve", "run"):
                self.sent.append((verb, dict(args)))
            if verb == "show" and args.get("ref") in self.runs:
                data = {"kind": "run", "value": copy.deepcopy(self.runs[args["ref"]])}
            elif verb == "show" and args.get("ref") in self.tickets:
                ticket = self.tickets[args["ref"]]
                runs = [r for r in self.runs.values() if r["ticket"] == ticket["id"]]
                data = {"kind": "ticket", "value": {**ticket, "runs": runs, "body": "",
                                                     "path": "t.md", "project": "default",
                                                     "flow": "review", "priority": 0}}  # fmt: skip
            elif verb == "show":
                data = copy.deepcopy(self.dashboard())
            elif verb == "events":
                data = {"events": [], "next_cursor": None}
            elif verb == "logs":
                data = {"records": [], "next_cursor": None, "complete": True, "terminal": True}
            elif verb == "diff":
                data = {"run": args.get("run"), "base": "1" * 40, "head": "2" * 40,
                        "files": [], "text": "", "base_source": "base"}  # fmt: skip
            elif verb == "resolve":
                data, error = self.resolve(args)
            elif verb == "run":
                tid = args.get("ref")
                data = {"trigger": {"id": "G1", "ticket": tid, "due_at_ms": NOW}}
            else:
                error = {"code": "not_found", "message": f"no {verb} here"}
        if error is not None:
            return {"id": request["id"], "ok": False, "error": {**error, "details": {}}}
        return {"id": request["id"], "ok": True, "data": data}


@pytest.fixture
def world() -> Iterator[tuple[World, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="w", dir="/tmp"))
    state = World()
    daemon = ScriptedDaemon(folder / "op.sock", state.answer)
    try:
        yield state, folder / "op.sock"
    finally:
        daemon.close()
        shutil.rmtree(folder, ignore_errors=True)


def labels(driver: Any, css: str) -> list[str]:
    found: list[str] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' button.action')]"
        ".map(b => b.textContent.trim());",
        css,
    )
    return found


def attention_runs(driver: Any) -> list[str]:
    found: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#attention tbody tr')]"
        ".map(r => r.dataset.run || r.dataset.ticket || '?');"
    )
    return found


def test_attention_rows_offer_the_ways_out_and_held_tickets_are_counted_apart(
    world: tuple[World, Path], tmp_path: Path
) -> None:
    state, sock = world
    with (
        gateway(sock, tmp_path / "t.token", "--allow-actions") as web,
        chromium(1440, 1100) as driver,
    ):
        driver.get(web.url)
        wait_for(driver, has_text("#attention", "login#1"))
        # Only the runs that need a person: no held ticket is an attention row.
        wait_for(driver, lambda d: attention_runs(d) == ["R6", "R7", "R8"])
        assert text_of(driver, "#attention h2") == "Needs attention (3)"
        assert f"{HELD} tickets held, waiting by intent" in text_of(driver, "#attention-held")
        # The rows do not come back under Tickets: the held ones are listed there only.
        tickets = text_of(driver, "#tickets")
        assert "Fix the login" not in tickets
        assert "Cannot pass" not in tickets
        assert "Later 0" in tickets
        # A needs_review row: both resolutions and Run again; a failed one: Run again.
        row = '#attention tr[data-run="R7"]'
        assert labels(driver, row) == ["Merged by hand", "Dismiss", "Run again"]
        assert verbs(driver, row) == ["resolve", "resolve", "run"]
        assert labels(driver, '#attention tr[data-run="R8"]') == ["Run again"]
        screenshot(driver, tmp_path, "attention-ways-out")

        # Dismiss asks first; Cancel sends nothing.
        driver.find_element("css selector", f"{row} button.action-resolve-dismissed").click()
        wait_for(driver, dialog_open)
        assert "Dismiss login#1?" in text_of(driver, "dialog.confirm")
        driver.find_element("css selector", "dialog.confirm .confirm-cancel").click()
        wait_for(driver, lambda d: not dialog_open(d))
        assert state.sent == []
        driver.find_element("css selector", f"{row} button.action-resolve-dismissed").click()
        wait_for(driver, dialog_open)
        driver.find_element("css selector", "#confirm-reason").send_keys("duplicate of T3")
        screenshot(driver, tmp_path, "dismiss-dialog")
        driver.find_element("css selector", "dialog.confirm .confirm-go").click()
        wait_for(driver, lambda d: state.sent)
        by = resolver()  # the gateway's user, "via sloopctl web": never the browser's word
        assert by.endswith("via sloopctl web")
        assert state.sent == [
            ("resolve", {"run": "R7", "resolution": "dismissed", "reason": "duplicate of T3",
                         "by": by})
        ]  # fmt: skip
        # Resolved: it leaves Needs attention.
        wait_for(driver, lambda d: attention_runs(d) == ["R6", "R8"])
        # Among the recent runs it reads as what a person made of it.
        wait_for(driver, has_text("#recent-all", "settled run"))
        wait_for(driver, has_text("main", "resolved: dismissed"))

        # Run again on a failed run's row: `run` of its ticket.
        again = '#attention tr[data-run="R8"] button.action-run'
        driver.find_element("css selector", again).click()
        wait_for(driver, lambda d: len(state.sent) == 2)
        assert state.sent[1] == ("run", {"ref": "T8"})
        wait_for(driver, has_text('#attention tr[data-run="R8"]', "queued (G1)"))
        assert console_errors(driver) == []
        # The gateway passes resolve on with its documented arguments only (no "by").
        for body in (
            {"verb": "resolve", "args": {"run": "R6", "resolution": "merged", "by": "mallory"}},
            {"verb": "resolve", "args": {"run": "R6", "resolution": 1}},
        ):
            assert post_action(web, body) == (400, b"bad request\n"), body
        assert len(state.sent) == 2


def test_the_run_page_resolves_a_needs_review_run_and_then_reads_resolved(
    world: tuple[World, Path], tmp_path: Path
) -> None:
    state, sock = world
    with (
        gateway(sock, tmp_path / "t.token", "--allow-actions") as web,
        chromium(1200, 1000) as driver,
    ):
        driver.get(web.url.replace("/?", "/run/R6?"))
        wait_for(driver, has_text("#reason", "no merge stage"))
        wait_for(driver, lambda d: labels(d, "main") == ["Merged by hand", "Dismiss", "Run again"])
        driver.find_element("css selector", "main button.action-resolve-merged").click()
        wait_for(driver, dialog_open)
        assert "Merged by hand" in text_of(driver, "dialog.confirm")
        driver.find_element("css selector", "dialog.confirm .confirm-go").click()  # no reason
        wait_for(driver, lambda d: state.sent)
        assert state.sent == [("resolve", {"run": "R6", "resolution": "merged", "by": resolver()})]
        # The run reads resolved (its state stays needs_review, its resolution says how).
        wait_for(driver, has_text("#resolution", f"resolved: merged by hand (by {resolver()}, "))
        assert "needs review" in text_of(driver, "h1")
        wait_for(driver, lambda d: "resolved" in d.title)
        # Merged by hand: no way out is left (the ticket is merged), not even Run again.
        wait_for(driver, lambda d: labels(d, "main") == [])
        screenshot(driver, tmp_path, "run-resolved")

        # Another needs_review run: Run again from its own page queues its ticket.
        driver.get(f"{web.base}/run/R7")
        wait_for(driver, lambda d: labels(d, "main") == ["Merged by hand", "Dismiss", "Run again"])
        driver.find_element("css selector", "main button.action-run").click()
        wait_for(driver, lambda d: len(state.sent) == 2)
        assert state.sent[1] == ("run", {"ref": "T7"})
        # A dismissed run with a reason says so, and still offers Run again.
        driver.find_element("css selector", "main button.action-resolve-dismissed").click()
        wait_for(driver, dialog_open)
        driver.find_element("css selector", "#confirm-reason").send_keys("not wanted")
        driver.find_element("css selector", "dialog.confirm .confirm-go").click()
        wait_for(driver, has_text("#resolution", "resolved: dismissed"))
        assert "not wanted" in text_of(driver, "#resolution")
        wait_for(driver, lambda d: labels(d, "main") == ["Run again"])
        assert console_errors(driver) == []
