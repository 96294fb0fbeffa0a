"""Acting on the web view, and a view that never claims more than it knows.

Real daemon, real gateway (``--allow-actions`` where a test acts), headless
Chromium. The buttons follow the states of docs/protocol.md; Abort and Pause ask
first and send the reason typed; a daemon that stops answering freezes the page
and says so; a gateway restarted with a new token ends an open tab's access; a
daemon without a sandbox says ``UNSAFE`` on every page.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import wait_until
from tests.support.web import (
    chromium,
    console_errors,
    gateway,
    has_text,
    needs_browser,
    screenshot,
    socket_of,
    start_gateway,
    text_of,
    wait_for,
)

pytestmark = needs_browser


def verbs(driver: Any, css: str) -> list[str]:
    """The verbs of the action buttons under ``css`` (enabled or not), in order."""
    found: list[str] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' button.action')]"
        ".map(b => b.dataset.verb);",
        css,
    )
    return found


def dialog_open(driver: Any) -> bool:
    return bool(driver.execute_script("return !!document.querySelector('dialog.confirm[open]');"))


def slow_bench(bench: Bench, **tickets: str) -> None:
    """A ``slow`` flow whose agent waits for the flag ``go``; the default flow merges."""
    slow = [
        {
            "name": "implement",
            "action": "agent",
            "command": bench.argv("--say", "working on {run}", "--wait-for", bench.flag("go")),
        },
    ]
    agent = bench.argv("--write", "done.txt=done by {run}")
    bench.setup(sloop_toml(agent, flows={"slow": slow}), tickets)
    bench.start()


def test_actions_fit_the_state_of_each_ticket_run_and_gate(bench: Bench, tmp_path: Path) -> None:
    slow_bench(
        bench,
        busy=ticket_text("Busy one", flow="slow"),
        later=ticket_text("Wait for me"),
        finished=ticket_text("Already done"),
    )
    finished = bench.post("finished")["ticket"]["id"]
    merged_run = bench.wait_run("finished#1")
    assert merged_run["state"] == "merged", merged_run
    busy = bench.post("busy")["ticket"]["id"]
    running = bench.wait_stage_running("busy#1", "implement")
    held = bench.post("later", hold=True)["ticket"]["id"]
    assert bench.ticket(held)["state"] == "held"
    with (
        gateway(socket_of(bench), tmp_path / "token", "--allow-actions") as web,
        chromium(1100, 1300) as driver,
    ):
        driver.get(web.url)
        wait_for(driver, has_text("main", "Wait for me"))
        wait_for(driver, lambda d: verbs(d, f'.actions[data-run="{running["id"]}"]') == ["abort"])
        assert verbs(driver, f'.actions[data-ticket="{held}"]') == ["ready"]
        assert verbs(driver, f'.actions[data-ticket="{busy}"]') == []  # running: abort its run
        assert verbs(driver, ".actions[data-gate]") == ["pause"]  # the gate is open
        assert driver.find_elements("css selector", "#unsafe") == []  # bwrap: nothing unsafe
        screenshot(driver, tmp_path, "dashboard-actions")

        # The ticket pages: a running ticket offers the abort of its run, a held one
        # Ready, a merged one nothing.
        driver.get(f"{web.base}/ticket/{busy}")
        wait_for(driver, has_text("main", "Busy one"))
        wait_for(driver, lambda d: verbs(d, "main") == ["abort"])
        driver.get(f"{web.base}/ticket/{held}")
        wait_for(driver, has_text("main", "Wait for me"))
        wait_for(driver, lambda d: verbs(d, "main") == ["ready"])
        # The waiting reason reads once: "held: 'ready' releases it", not "held held".
        waiting = text_of(driver, "main .waiting")
        assert "held: 'ready' releases it" in waiting, waiting
        assert "held held" not in text_of(driver, "main")
        driver.get(f"{web.base}/ticket/{finished}")
        wait_for(driver, has_text("main", "Already done"))
        wait_for(driver, has_text("main", "merged"))
        assert verbs(driver, "main") == []
        # The run pages: Abort on the run in flight only.
        driver.get(f"{web.base}/run/{running['id']}")
        wait_for(driver, has_text("#log", f"working on {running['id']}"))
        assert verbs(driver, "main") == ["abort"]
        driver.get(f"{web.base}/run/{merged_run['id']}")
        wait_for(driver, has_text("h1", "merged"))
        assert verbs(driver, "main") == []

        # Pause asks for a reason, which becomes the gate's; a paused gate offers Resume only.
        driver.get(f"{web.base}/")
        wait_for(driver, lambda d: verbs(d, ".actions[data-gate]") == ["pause"])
        driver.find_element("css selector", ".actions[data-gate] button.action-pause").click()
        wait_for(driver, dialog_open)
        driver.find_element("css selector", "#confirm-reason").send_keys("release freeze")
        screenshot(driver, tmp_path, "pause-dialog")
        driver.find_element("css selector", "dialog.confirm .confirm-go").click()
        wait_for(driver, lambda _: bench.dashboard()["gate"]["state"] == "paused")
        assert bench.dashboard()["gate"]["reason"] == "release freeze"
        wait_for(driver, lambda d: verbs(d, ".actions[data-gate]") == ["resume"])
        wait_for(driver, has_text("#gate", "release freeze"))
        driver.find_element("css selector", ".actions[data-gate] button.action-resume").click()
        wait_for(driver, lambda d: verbs(d, ".actions[data-gate]") == ["pause"])
        assert bench.dashboard()["gate"]["state"] == "open"

        # Ready releases the held ticket (a trigger is queued: it runs and merges).
        driver.find_element("css selector", f'.actions[data-ticket="{held}"] button').click()
        wait_for(driver, lambda _: bench.ticket(held)["state"] != "held")
        assert console_errors(driver) == []
    bench.release("go")
    # A flow without a merge stage ends awaiting a person.
    assert bench.wait_run(running["id"])["state"] == "needs_review"


def test_abort_asks_first_and_keeps_the_reason(bench: Bench, tmp_path: Path) -> None:
    slow_bench(bench, busy=ticket_text("Busy one", flow="slow"))
    bench.post("busy")
    run = bench.wait_stage_running("busy#1", "implement")
    with (
        gateway(socket_of(bench), tmp_path / "token", "--allow-actions") as web,
        chromium() as driver,
    ):
        driver.get(web.url)
        driver.get(f"{web.base}/run/{run['id']}")
        button = wait_for(driver, lambda d: d.find_elements("css selector", "button.action-abort"))
        # Cancelled: the dialog goes and nothing is sent.
        button[0].click()
        wait_for(driver, dialog_open)
        assert f"Abort {run['alias']}?" in text_of(driver, "dialog.confirm")
        driver.find_element("css selector", "dialog.confirm .confirm-cancel").click()
        wait_for(driver, lambda d: not dialog_open(d))
        # The page's own answer area stays empty: no request was made, so none answered.
        assert text_of(driver, ".action-result").strip() == ""
        shown = bench.show_run(run["id"])
        assert shown is not None
        assert shown["state"] == "running"
        assert "run_aborted" not in bench.event_kinds(run["id"])
        # Confirmed with a reason: the run settles aborted and its reason says why.
        driver.find_element("css selector", "button.action-abort").click()
        wait_for(driver, dialog_open)
        driver.find_element("css selector", "#confirm-reason").send_keys("wrong ticket")
        screenshot(driver, tmp_path, "abort-dialog")
        driver.find_element("css selector", "dialog.confirm .confirm-go").click()
        settled = bench.wait_run(run["id"])
        assert settled["state"] == "aborted"
        assert settled["reason"] == "aborted by the operator: wrong ticket"
        wait_for(driver, has_text("#reason", "aborted by the operator: wrong ticket"))
        wait_for(driver, lambda d: verbs(d, "main") == [])  # settled: nothing to abort
        screenshot(driver, tmp_path, "aborted-with-reason")
        assert console_errors(driver) == []


def test_a_daemon_that_stops_answering_freezes_the_page_and_says_since_when(
    bench: Bench, tmp_path: Path
) -> None:
    slow_bench(bench, busy=ticket_text("Busy one", flow="slow"))
    bench.post("busy")
    bench.wait_stage_running("busy#1", "implement")
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        driver.get(web.url)
        wait_for(driver, lambda d: text_of(d, "span.growing").strip() not in ("", "—"))
        first = text_of(driver, "span.growing")
        wait_for(driver, lambda d: text_of(d, "span.growing") != first)  # it grows while live
        assert driver.find_elements("css selector", "#stale") == []
        assert bench.daemon is not None
        bench.daemon.kill9()  # a daemon that is gone, not one that said goodbye
        banner = wait_for(driver, has_text("#stale", "The daemon is not answering since"))
        assert banner
        assert "what you see is frozen" in text_of(driver, "#stale")
        frozen = text_of(driver, "span.growing")
        time.sleep(2.5)  # longer than the one-second tick: a live counter would move
        assert text_of(driver, "span.growing") == frozen
        screenshot(driver, tmp_path, "stale-banner")
        bench.start()  # the same socket: the gateway's feeds find it again
        wait_for(driver, lambda d: d.find_elements("css selector", "#stale") == [], timeout=40)
        # The run continues (issue 38): its stage's next execution runs.
        bench.wait_stage_running("busy#1", "implement", timeout=40)
        wait_for(driver, lambda d: text_of(d, "span.growing").strip() not in ("", "—"))
        again = text_of(driver, "span.growing")
        wait_for(driver, lambda d: text_of(d, "span.growing") != again)  # growing again
        assert console_errors(driver) == []
    bench.release("go")


def test_a_gateway_restart_ends_an_open_tabs_access(bench: Bench, tmp_path: Path) -> None:
    bench.setup(sloop_toml(bench.argv()), {"secret": ticket_text("Secret plans")})
    bench.start()
    bench.post("secret", manual=True)
    first = start_gateway(socket_of(bench), tmp_path / "first-token")
    port = first.port
    try:
        with chromium() as driver:
            driver.get(first.url)
            wait_for(driver, has_text("main", "Secret plans"))
            assert first.stop() == 0
            # The same address, a new token (as after a restart): the tab's cookie is stale.
            second = start_gateway(
                socket_of(bench), tmp_path / "second-token", "--listen", f"127.0.0.1:{port}"
            )
            try:
                assert second.port == port
                assert second.token != first.token
                ended = wait_for(driver, has_text("#access-ended", "access has ended"), 40)
                assert ended
                page = text_of(driver, "main")
                assert "sloopctl web" in page
                assert "Secret plans" not in page  # what was shown is gone, not left stale
                assert "reconnecting" not in text_of(driver, "#link-state")
                screenshot(driver, tmp_path, "access-ended")
                # A reload: a readable page, still a 401, and nothing of the daemon's.
                driver.refresh()
                wait_for(driver, has_text("h1", "This view's access has ended"))
                assert "sloopctl web" in text_of(driver, "body")
                assert "Secret plans" not in driver.page_source
                screenshot(driver, tmp_path, "access-ended-reload")
                status, headers, body = second.request(
                    "GET", "/run/R1", headers={"Accept": "text/html"}, cookie=False
                )
                assert status == 401
                assert headers["Content-Type"].startswith("text/html")
                assert b"access has ended" in body
                assert b"Secret" not in body
                assert "default-src 'none'" in headers["Content-Security-Policy"]
                # API clients keep the bare word.
                for path in ("/api/show", "/sse/show", "/static/app.js"):
                    status, _, body = second.request(
                        "GET", path, headers={"Accept": "text/html"}, cookie=False
                    )
                    assert (status, body) == (401, b"unauthorized\n"), path
                # The printed URL still lets the same browser in.
                driver.get(second.url)
                wait_for(driver, has_text("main", "Secret plans"))
                assert driver.find_elements("css selector", "#access-ended") == []
            finally:
                assert second.stop() == 0
    finally:
        first.stop()


def test_a_daemon_without_a_sandbox_says_unsafe_on_every_page(bench: Bench, tmp_path: Path) -> None:
    agent = bench.argv("--write", "plain.txt=plain")
    bench.setup(sloop_toml(agent, sandbox="none"), {"plain": ticket_text("Plain")})
    bench.start()
    warning = bench.dashboard()["daemon"]["sandbox"]["warning"]
    assert warning
    ticket = bench.post("plain")["ticket"]["id"]
    run = bench.wait_run("plain#1")
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        driver.get(web.url)
        # "pla", not "plain": an exact name would send the search page on to the ticket's.
        for path in ("/", f"/ticket/{ticket}", f"/run/{run['id']}", "/search?q=pla"):
            driver.get(f"{web.base}{path}")
            wait_for(driver, has_text("#unsafe", "UNSAFE:"))
            # The daemon's own sentence, as `sloopctl show` prints it after "UNSAFE: ".
            assert text_of(driver, "#unsafe") == f"UNSAFE: {warning}", path
        screenshot(driver, tmp_path, "unsafe")
        assert console_errors(driver) == []


def test_a_cooldown_offers_pause_and_resume_and_disables_run(bench: Bench, tmp_path: Path) -> None:
    limit = f"Claude AI usage limit reached|{int(time.time()) + 3600}"
    limited = [
        {
            "name": "implement",
            "action": "agent",
            "command": bench.argv("--say", limit, "--exit", "1"),
        }
    ]
    bench.setup(
        sloop_toml(bench.argv(), flows={"limited": limited}),
        {"limited": ticket_text("Hits a limit", flow="limited")},
    )
    bench.start()
    ticket = bench.post("limited")["ticket"]["id"]
    bench.wait_run("limited#1")
    wait_until(lambda: bench.dashboard()["gate"]["state"] == "cooldown")
    with (
        gateway(socket_of(bench), tmp_path / "token", "--allow-actions") as web,
        chromium() as driver,
    ):
        driver.get(web.url)
        wait_for(driver, lambda d: verbs(d, ".actions[data-gate]") == ["pause", "resume"])
        wait_for(driver, lambda d: verbs(d, f'.actions[data-ticket="{ticket}"]') == ["hold", "run"])
        run = driver.find_element(
            "css selector", f'.actions[data-ticket="{ticket}"] button.action-run'
        )
        assert not run.is_enabled()  # the daemon would answer cooldown_active
        assert "cooldown" in run.get_attribute("title")
        assert "cooldown" in text_of(driver, f'.actions[data-ticket="{ticket}"] .action-result')
        # Held first (so that its trigger, made due by the resume, waits), then Resume
        # ends the cooldown early: Pause alone on the gate.
        driver.find_element(
            "css selector", f'.actions[data-ticket="{ticket}"] button.action-hold'
        ).click()
        wait_for(driver, lambda d: verbs(d, f'.actions[data-ticket="{ticket}"]') == ["ready"])
        driver.find_element("css selector", ".actions[data-gate] button.action-resume").click()
        wait_for(driver, lambda d: verbs(d, ".actions[data-gate]") == ["pause"])
        assert bench.dashboard()["gate"]["state"] == "open"
        assert console_errors(driver) == []
