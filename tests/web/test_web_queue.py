"""The merge queue (issue 32) on the web view, in a real headless Chromium and the real
gateway, against a scripted operator socket that answers in the design's wire shapes:
the dashboard's "Merge queue" after the runs in flight (entries in order, their state,
candidate and "main + R7", runs linked), a run page's place in the queue, executions a
rebuild cut short drawn as rebuilt, and the ``queue_*`` events in words.

The page's sentences are the terminal's (sloopctl/queue_view.py): the same fixture
through both must read the same. tests/integration/test_queue_view.py (the CLI) and
``test_a_queued_run_behind_another_on_the_real_daemon`` below see it through a real daemon.
"""

from __future__ import annotations

import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sloopctl.queue_view import event_words, place_line
from tests.integration.test_queue_view import two_queued_tickets
from tests.support.agents import Bench
from tests.support.web import (
    chromium,
    console_errors,
    gateway,
    has_text,
    needs_browser,
    screenshot,
    socket_of,
    text_of,
    wait_for,
)
from tests.unit.test_sloopctl_cli import FakeDaemon
from tests.unit.test_sloopctl_queue import NOW, QUEUE, stage

pytestmark = needs_browser

RUN = {
    "id": "R10",
    "alias": "docs#1",
    "ticket": "T10",
    "attempt": 1,
    "state": "running",
    "terminal": False,
    "reason": None,
    "halt": None,
    "flow": "default",
    "branch": "sloop/docs-1",
    "claimed_at_ms": NOW - 120_000,
    "started_at_ms": NOW - 120_000,
    "finished_at_ms": None,
    "agent_exit_code": 0,
    "usage": None,
    "stall": None,
    "diagnosis": None,
    "followed_by": None,
    "notes": [],
    "queue": {**QUEUE[2], "merge_window": 8, "stale": "main moved"},
    "stages": [
        stage(
            "implement",
            1,
            "passed",
            started_at_ms=NOW - 120_000,
            finished_at_ms=NOW - 100_000,
            duration_ms=20_000,
            exit_code=0,
            commit="1" * 40,
        ),
        stage(
            "sync",
            1,
            "passed",
            started_at_ms=NOW - 100_000,
            finished_at_ms=NOW - 99_000,
            duration_ms=1000,
            commit="2" * 40,
        ),
        stage(
            "test",
            1,
            "failed",
            ended_by="rebuilt",
            aborted=False,
            started_at_ms=NOW - 99_000,
            finished_at_ms=NOW - 90_000,
            duration_ms=9000,
            exit_code=-15,
            reason="rebuilt: R5 left the queue (stage 'test' failed)",
            commit="2" * 40,
        ),
        stage(
            "sync",
            2,
            "passed",
            started_at_ms=NOW - 90_000,
            finished_at_ms=NOW - 89_000,
            duration_ms=1000,
            commit="b" * 40,
        ),
        stage(
            "test",
            2,
            "failed",
            started_at_ms=NOW - 89_000,
            finished_at_ms=NOW - 80_000,
            duration_ms=9000,
            exit_code=1,
            reason="exited with code 1",
            commit="b" * 40,
        ),
        stage("merge", 0, "pending"),
    ],
}
EVENTS = [
    {"cursor": "1", "at_ms": NOW - 60_000, "kind": "queue_joined", "ticket": "T10", "run": "R10",
     "data": {"position": 3}},
    {"cursor": "2", "at_ms": NOW - 50_000, "kind": "queue_rebuilt", "ticket": "T10", "run": "R10",
     "data": {"cause": "left_failed", "by": "R5",
              "reason": "R5 left the queue (stage 'test' failed)"}},
    {"cursor": "3", "at_ms": NOW - 40_000, "kind": "queue_landed", "ticket": "T7", "run": "R7",
     "data": {"commit": "3f2a9c1d0b12" + "0" * 28, "waited_ms": 95_000}},
]  # fmt: skip


def dashboard() -> dict[str, Any]:
    runs = [
        {"id": e["run"], "alias": e["alias"], "ticket": e["ticket"], "state": "running",
         "terminal": False, "started_at_ms": NOW - 100_000, "stall": None, "usage": None,
         "stages": [stage("test", 1, "running")] if e["run"] == "R9" else []}
        for e in QUEUE
    ]  # fmt: skip
    return {
        "kind": "dashboard",
        "daemon": {"version": "0.9.0", "pid": 1, "repo": "/srv/repo"},
        "gate": {"state": "open", "until_ms": None, "reason": None},
        "runs": runs,
        "queued_triggers": [],
        "tickets": [],
        "recent": [],
        "recent_total": 0,
        "attention": [],
        "attention_total": 0,
        "queue": QUEUE,
        "merge_window": 8,
    }


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The daemon's side: no long-poll (the gateway then polls), fixtures for the rest."""
    verb, args = request["verb"], request["args"]
    held = sorted({"wait_ms", "since"} & set(args))
    if held:
        details = {"field": held[-1]}
        error = {"code": "invalid_arguments", "message": "unknown argument", "details": details}
        return {"id": request["id"], "ok": False, "error": error}
    data: Any
    if verb == "show" and args.get("ref") in ("R10", "docs#1"):
        data = {"kind": "run", "value": RUN}
    elif verb == "show" and args.get("ref"):
        run = next(e for e in QUEUE if e["run"] == args["ref"])
        value = {**RUN, "id": run["run"], "alias": run["alias"], "queue": run}
        value["stages"] = [stage("test", 1, "running", started_at_ms=NOW)]
        data = {"kind": "run", "value": value}
    elif verb == "show":
        data = dashboard()
    elif verb == "events":
        after = int(args.get("after") or 0)
        data = {"events": EVENTS[after:], "next_cursor": str(len(EVENTS))}
    elif verb == "logs":
        data = {"records": [], "next_cursor": None, "complete": True, "terminal": False}
    elif verb == "diff":
        data = {"run": args.get("run"), "base": "1" * 40, "head": "2" * 40, "files": [],
                "text": "", "base_source": "base"}  # fmt: skip
    else:
        error = {"code": "not_found", "message": f"no {verb} here", "details": {}}
        return {"id": request["id"], "ok": False, "error": error}
    return {"id": request["id"], "ok": True, "data": data}


class ScriptedDaemon(FakeDaemon):
    """The CLI tests' fake, serving each connection in its own thread: the gateway
    keeps one open per feed (the dashboard, the events, a run's log)."""

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as lines:
            self._answer_lines(conn, lines)


@pytest.fixture
def scripted() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="q", dir="/tmp"))
    daemon = ScriptedDaemon(folder / "op.sock", answer)
    try:
        yield folder / "op.sock"
    finally:
        daemon.close()
        shutil.rmtree(folder, ignore_errors=True)


def rows_of(driver: Any) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    return [
        [cell.text for cell in row.find_elements(By.CSS_SELECTOR, "td")]
        for row in driver.find_elements(By.CSS_SELECTOR, "#merge-queue tbody tr")
    ]


def test_the_dashboard_draws_the_queue_in_order_after_the_runs_in_flight(
    scripted: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    with gateway(scripted, tmp_path / "t.token") as web, chromium() as driver:
        driver.get(web.url)
        wait_for(driver, has_text("#queue-section h2", "Merge queue (window 8)"))
        wait_for(driver, has_text("#queue-section", "its gate test#1 running on main + R7"))
        titles = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "#page section h2")]
        assert titles.index("Merge queue (window 8)") == titles.index("Runs in flight") + 1
        rows = rows_of(driver)
        assert [row[0] for row in rows] == ["1", "2", "3", "4", "5"]
        assert [row[1].split()[0] for row in rows] == [e["alias"] for e in QUEUE]
        # Each state as a word with a shape (never by colour alone).
        assert [row[2].split()[1] for row in rows] == [e["state"] for e in QUEUE]
        assert "rebuilt once" in rows[2][2]
        assert rows[0][3] == "3f2a9c1d0b12"
        assert rows[1][4] == "its gate test#1 running on main + R7"
        assert rows[2][4] == "its gate failed on main + R7 + R9; waiting for R9's gates"
        assert rows[4][4] == "not built yet; waiting for a place in the merge window (8)"
        # The runs are links: each entry's own, and those its candidate is built on.
        links = driver.find_elements(By.CSS_SELECTOR, "#merge-queue tbody tr")[2]
        hrefs = [a.get_attribute("href") for a in links.find_elements(By.CSS_SELECTOR, "a")]
        assert [h.rsplit("/", 1)[1] for h in hrefs] == ["R10", "R7", "R9"]
        # The activity feed says the queue's events in words, as `sloopctl events` does.
        wait_for(driver, has_text("#activity", "rebuilt: R5 left the queue"))
        activity = text_of(driver, "#activity")
        assert "joined the merge queue, 3rd" in activity
        assert "landed 3f2a9c1d0b12 after 1 min 35 s in the queue" in activity
        assert str(event_words("queue_joined", {"position": 3})) in activity
        screenshot(driver, tmp_path, "queue-dashboard")
        assert console_errors(driver) == []


def test_a_run_page_says_its_place_and_draws_a_rebuilt_execution_as_rebuilt(
    scripted: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    with gateway(scripted, tmp_path / "t.token") as web, chromium() as driver:
        driver.get(web.url.replace("/?", "/run/R10?"))
        wait_for(driver, has_text("#queue-place", "3rd in the merge queue"))
        place = text_of(driver, "#queue-place")
        # The terminal's sentence, word for word.
        assert place == place_line(RUN["queue"], stages=RUN["stages"])
        assert place == (
            "3rd in the merge queue (window 8), held: its gate failed on main + R7 + R9; "
            "waiting for R9's gates; to be rebuilt: main moved; rebuilt once"
        )
        onto = driver.find_elements(By.CSS_SELECTOR, "#queue-place a")
        assert [a.text for a in onto] == ["R7", "R9"]
        # The rebuilt execution: its bar, its chip and its row say rebuilt, not failed.
        wait_for(driver, has_text("#timeline", "↻ rebuilt"))
        assert driver.find_elements(By.CSS_SELECTOR, "#timeline .bar.state-rebuilt")
        bars = driver.find_elements(By.CSS_SELECTOR, "#timeline .bar")
        labels = [b.get_attribute("aria-label") for b in bars]
        assert "test#1 rebuilt" in labels
        assert "test#2 failed" in labels
        rows = driver.find_elements(By.CSS_SELECTOR, "table.rows tbody tr")
        cells = {
            r.find_element(By.CSS_SELECTOR, 'td[data-label="Execution"]').text.split()[-1]: r
            for r in rows
            if r.find_elements(By.CSS_SELECTOR, 'td[data-label="Execution"]')
        }
        rebuilt = cells["test#1"]
        assert rebuilt.find_element(By.CSS_SELECTOR, 'td[data-label="Exit"]').text == "rebuilt"
        verdict = rebuilt.find_element(By.CSS_SELECTOR, 'td[data-label="Verdict"]').text
        assert verdict.startswith("REBUILT · not a failure")
        assert "R5 left the queue" in verdict
        failed = cells["test#2"]
        assert failed.find_element(By.CSS_SELECTOR, 'td[data-label="Exit"]').text == "1"
        screenshot(driver, tmp_path, "queue-run")
        assert console_errors(driver) == []


def test_a_queued_run_behind_another_on_the_real_daemon(bench: Bench, tmp_path: Path) -> None:
    """The same through a real daemon: the dashboard lists the run queued behind
    another 2nd, gating on main + the run ahead (a link), and its page says its place.
    The gate sleeps 6 s (not 3): time for a browser to load the second page too."""
    from selenium.webdriver.common.by import By

    two_queued_tickets(bench, gate_seconds=6)
    with gateway(socket_of(bench), tmp_path / "t.token") as web, chromium() as driver:
        driver.get(web.url)

        def second_row(driver: Any) -> list[str] | None:
            rows = rows_of(driver)
            return rows[1] if len(rows) == 2 and "running on main + R" in rows[1][4] else None

        row = wait_for(driver, second_row)
        assert row[0] == "2"
        assert row[2].split()[1] == "gating"
        ahead = rows_of(driver)[0][1].split()[-1]  # "a#1 R1": the run's alias, then its id
        # The gateway adds each run's running stage: the gate is named, as in show RUN.
        assert re.fullmatch(rf"its gate test#1 running on main \+ {ahead}", row[4]), row
        second = row[1].split()[-1]
        queued = driver.find_elements(By.CSS_SELECTOR, "#merge-queue tbody tr")[1]
        assert queued.get_attribute("data-run") == second
        link = queued.find_element(By.CSS_SELECTOR, "a.onto-run")
        assert link.text == ahead
        screenshot(driver, tmp_path, "queue-real-dashboard")

        driver.get(web.url.replace("/?", f"/run/{second}?"))
        wait_for(driver, has_text("#queue-place", "in the merge queue"))
        place = text_of(driver, "#queue-place")
        # Still 2nd: the gate outlasts the page's load (the entry carries its window).
        window = r"(?: \(window \d+\))?"
        assert re.fullmatch(
            rf"2nd in the merge queue{window}, its gate test#1 running on main \+ {ahead}",
            place,
        ), place
        screenshot(driver, tmp_path, "queue-real-run")
        assert console_errors(driver) == []
    runs = [bench.wait_run(f"{name}#1") for name in ("a", "b")]
    assert [r["state"] for r in runs] == ["merged", "merged"], [r["reason"] for r in runs]
