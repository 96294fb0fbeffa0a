"""The web view in a real headless Chromium, against a real daemon and gateway.

Each test drives the pages as a person would (no reload unless it says so) and
saves a screenshot of what it saw in its temporary folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.agents import Bench, install_probe, probe_argv, sloop_toml, ticket_text
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

pytestmark = needs_browser


def test_the_dashboard_shows_a_posted_ticket(bench: Bench, tmp_path: Path) -> None:
    bench.setup(sloop_toml(bench.argv()), {"fix-login": ticket_text("Fix the login page")})
    bench.start()
    posted = bench.post("fix-login", manual=True)
    ticket_id = posted["ticket"]["id"]
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        driver.get(web.url)
        wait_for(driver, has_text("main", "Fix the login page"))
        assert ticket_id in text_of(driver, "main")
        assert "no_trigger" in text_of(driver, "main")  # why it waits
        assert "token=" not in driver.current_url  # the token left the address bar
        screenshot(driver, tmp_path, "dashboard")
        # The search box: the pattern rung of show (a regular expression here).
        box = driver.find_element("css selector", "#q")
        box.send_keys("fix-.*n")
        box.submit()
        wait_for(driver, has_text("main", "Tickets matching"))
        assert "Fix the login page" in text_of(driver, "main table")
        assert console_errors(driver) == []


def test_a_live_run_advances_and_its_output_appears_without_a_reload(
    bench: Bench, tmp_path: Path
) -> None:
    stages = [
        {
            "name": "implement",
            "action": "agent",
            "command": bench.argv(
                "--say", "implementing {run}", "--wait-for", bench.flag("implemented")
            ),
        },
        {
            "name": "check",
            "action": "command",
            "command": bench.argv("--say", "checking {run}", "--wait-for", bench.flag("checked")),
        },
    ]
    config = sloop_toml(bench.argv(), flows={"live": stages})
    bench.setup(config, {"live": ticket_text("Watch me", flow="live")})
    bench.start()
    bench.post("live")
    run = bench.wait_stage_running("live#1", "implement")
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        driver.get(web.url)
        # The dashboard's run in flight, with its running stage and how long it is silent.
        wait_for(driver, has_text("main", "implement#1"))
        assert "live#1" in text_of(driver, "main table")
        wait_for(driver, lambda d: text_of(d, "span.growing").strip() not in ("", "—"))
        screenshot(driver, tmp_path, "dashboard-live")
        driver.get(f"{web.base}/run/{run['id']}")
        wait_for(driver, has_text("#log", f"implementing {run['id']}"))
        wait_for(driver, has_text("#timeline", "implement#1"))
        # A mark on the page's window: a reload would lose it.
        driver.execute_script("window.__stillTheSamePage = true;")
        bench.release("implemented")
        wait_for(driver, has_text("#timeline", "check#1"))
        wait_for(driver, has_text("#log-status", "check#1"))  # the output follows the walk
        wait_for(driver, has_text("#log", f"checking {run['id']}"))
        screenshot(driver, tmp_path, "live-run")
        assert driver.execute_script("return window.__stillTheSamePage === true;")
        bench.release("checked")
        settled = bench.wait_run(run["id"])
        wait_for(driver, has_text("h1", settled["state"].replace("_", " ")))
        assert driver.execute_script("return window.__stillTheSamePage === true;")
        driver.set_window_size(420, 900)  # a phone: the same page, one column
        wait_for(driver, lambda d: d.execute_script("return innerWidth") <= 420)
        screenshot(driver, tmp_path, "run-on-a-phone")
        assert console_errors(driver) == []


def test_a_merged_run_shows_its_timeline_and_its_diff(bench: Bench, tmp_path: Path) -> None:
    # The default flow: implement (writes and commits a file) → sync → merge.
    agent = bench.argv("--say", "writing the greeting", "--write", "greeting.txt=hello from {run}")
    bench.setup(sloop_toml(agent), {"greet": ticket_text("Add a greeting")})
    bench.start()
    bench.post("greet")
    merged = bench.wait_run("greet#1")
    assert merged["state"] == "merged"
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium(1000, 1400) as driver:
        driver.get(web.url)
        driver.get(f"{web.base}/run/{merged['id']}")
        wait_for(driver, has_text("#diff", "greeting.txt"))
        timeline = text_of(driver, "#timeline")
        executions = [(s["stage"], s["attempt"]) for s in merged["stages"]]
        assert executions == [("implement", 1), ("sync", 1), ("merge", 1)]
        for stage, attempt in executions:
            assert f"{stage}#{attempt}" in timeline
        assert "exit 0" in timeline  # implement's exit code beside its bar
        bars = driver.execute_script(
            "return [...document.querySelectorAll('#timeline .bar')]"
            ".map(b => [b.parentElement.getBoundingClientRect().width,"
            " b.getBoundingClientRect().left - b.parentElement.getBoundingClientRect().left,"
            " b.getBoundingClientRect().width]);"
        )
        assert len(bars) == 3
        # Drawn to scale: each bar starts where its execution started on the run's axis,
        # and the bars follow one another in walk order.
        starts = [left for _, left, _ in bars]
        assert starts == sorted(starts)
        assert starts[0] == 0
        diff = text_of(driver, "#diff")
        assert f"+hello from {merged['id']}" in diff
        assert "1 file changed, +1" in diff
        assert "main before the merge" in diff
        screenshot(driver, tmp_path, "merged-run")
        assert console_errors(driver) == []


def test_a_request_without_the_token_is_refused(bench: Bench, tmp_path: Path) -> None:
    bench.setup(sloop_toml(bench.argv()), {"secret": ticket_text("Secret plans")})
    bench.start()
    bench.post("secret", manual=True)
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        driver.get(f"{web.base}/")  # no token, no cookie
        wait_for(driver, has_text("body", "unauthorized"))
        assert "Secret plans" not in driver.page_source
        screenshot(driver, tmp_path, "refused")
        driver.get(f"{web.base}/?token=not-the-token")
        wait_for(driver, has_text("body", "unauthorized"))
        driver.get(f"{web.base}/api/show?ref=secret")
        wait_for(driver, has_text("body", "unauthorized"))
        assert "Secret plans" not in driver.page_source
        # With the token the same browser is let in.
        driver.get(web.url)
        wait_for(driver, has_text("main", "Secret plans"))


def test_actions_are_refused_read_only_and_performed_with_allow_actions(
    bench: Bench, tmp_path: Path
) -> None:
    bench.setup(sloop_toml(bench.argv()), {"later": ticket_text("Do it later")})
    bench.start()
    ticket_id = bench.post("later", manual=True)["ticket"]["id"]
    hold = (
        "const done = arguments[arguments.length - 1];"
        "fetch('/api/session').then(r => r.json()).then(s => fetch('/api/action', {"
        " method: 'POST', headers: {'Content-Type': 'application/json', 'X-Sloop-CSRF': s.csrf},"
        f" body: JSON.stringify({{verb: 'hold', args: {{ref: '{ticket_id}'}}}})}}))"
        ".then(r => r.text().then(t => done([r.status, t])));"
    )
    with gateway(socket_of(bench), tmp_path / "ro-token") as web, chromium() as driver:
        driver.get(web.url)
        driver.get(f"{web.base}/ticket/{ticket_id}")
        wait_for(driver, has_text("main", "Do it later"))
        assert driver.find_elements("css selector", "button.action") == []  # no buttons
        # Even a well-formed request from the page itself is refused.
        status, body = driver.execute_async_script(hold)
        assert status == 403
        assert "--allow-actions" in body
        assert bench.ticket(ticket_id)["state"] == "ready"
        screenshot(driver, tmp_path, "read-only")
    with (
        gateway(socket_of(bench), tmp_path / "rw-token", "--allow-actions") as web,
        chromium() as driver,
    ):
        driver.get(web.url)
        driver.get(f"{web.base}/ticket/{ticket_id}")
        button = wait_for(driver, lambda d: d.find_elements("css selector", "button.action-hold"))[
            0
        ]
        button.click()
        wait_for(driver, has_text("main", "held"))
        assert bench.ticket(ticket_id)["state"] == "held"
        screenshot(driver, tmp_path, "held")
        wait_for(driver, lambda d: d.find_elements("css selector", "button.action-ready"))[
            0
        ].click()
        wait_for(driver, lambda _: bench.ticket(ticket_id)["state"] == "ready")


def test_ticket_text_with_markup_is_shown_as_text_and_never_run(
    bench: Bench, tmp_path: Path
) -> None:
    title = "<script>window.__pwned = 1</script> <b>bold</b>"
    body = '<img src=x onerror="window.__pwned = 2"> and <a href="javascript:alert(1)">a link</a>'
    bench.setup(sloop_toml(bench.argv()), {"markup": ticket_text(title, body)})
    bench.start()
    ticket_id = bench.post("markup", manual=True)["ticket"]["id"]
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        driver.get(web.url)
        wait_for(driver, has_text("main", "<script>window.__pwned = 1</script>"))
        driver.get(f"{web.base}/ticket/{ticket_id}")
        wait_for(driver, has_text("#ticket-body", '<img src=x onerror="window.__pwned = 2">'))
        assert "<b>bold</b>" in text_of(driver, "#ticket-title")
        assert driver.execute_script("return typeof window.__pwned;") == "undefined"
        # Nothing of the ticket became an element: no script, img or b of its making.
        made = driver.execute_script(
            "return document.querySelectorAll('main script, main img, main b').length;"
        )
        assert made == 0
        screenshot(driver, tmp_path, "markup-as-text")
        assert console_errors(driver) == []  # the CSP had nothing to block either


def test_a_panel_shows_each_seat_with_its_verdict_confidence_and_reason(
    bench: Bench, tmp_path: Path
) -> None:
    install_probe(bench)

    def seat(verdict: str, reason: str, confidence: str) -> list[str]:
        argv = ["verdict", verdict, "--reason", reason, "--confidence", confidence]
        steps = [{"do": "ctl", "key": "verdict", "argv": argv}]
        return probe_argv(bench, bench.flag(f"seat-{verdict}.json"), steps)

    flow: list[dict[str, Any]] = [
        {"name": "implement", "action": "agent", "command": bench.argv("--write", "a.txt=a")},
        {
            "name": "review",
            "action": "agent",
            "result_check": "panel",
            "quorum": 1,
            "reviewers": [
                {"target": "careful", "command": seat("pass", "reads well", "high")},
                {"target": "strict", "command": seat("fail", "needs a test", "low")},
            ],
        },
        {"name": "sync", "action": "sync"},
        {"name": "merge", "action": "ff_only"},
    ]
    bench.setup(
        sloop_toml(bench.argv(), flows={"panel": flow}), {"p": ticket_text("P", flow="panel")}
    )
    bench.start()
    bench.post("p")
    run = bench.wait_run("p#1")
    assert run["state"] == "merged", run
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium(1000, 1300) as driver:
        driver.get(web.url)
        driver.get(f"{web.base}/run/{run['id']}")
        wait_for(driver, has_text(".panel", "Panel of review#1"))
        panel = text_of(driver, ".panel")
        for words in ("careful", "reads well", "high", "strict", "needs a test", "low"):
            assert words in panel, words
        assert "review#1" in text_of(driver, "#timeline")
        screenshot(driver, tmp_path, "panel")
        assert console_errors(driver) == []
