"""The small items of issue 33 on the web view, against a real daemon and gateway in a
headless Chromium: a settled run's log controls say what they show (no "(running
stage)", a Seat filter only where a panel ran, no "Jump to latest" on a log that cannot
grow, a download of the rendered text with raw as the other choice); a stalled run's
page and tab say stalled, an aborted one shows no signal as its agent's exit; on a 390
px phone the log controls are 44 px targets and the line prefix is shorter; seats are
numbered as ``sloopctl show`` numbers them. The same needs_review run has its ways out
on the run page and its Needs attention row.
"""

from __future__ import annotations

import re
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
from tests.web.test_web_acting import dialog_open, verbs
from tests.web.test_web_logs import CLAUDE_STREAM, content, shown_lines, sloopctl

pytestmark = needs_browser


def options(driver: Any) -> list[str]:
    found: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#log-filter option')].map(o => o.textContent);"
    )
    return found


def seat_filter_shown(driver: Any) -> bool:
    return bool(
        driver.execute_script(
            "const s = document.getElementById('log-seat'); return !!s && !!s.offsetParent;"
        )
    )


def heights(driver: Any, selectors: list[str]) -> dict[str, float]:
    found: dict[str, float] = driver.execute_script(
        "return Object.fromEntries(arguments[0].map(s => {"
        "  const n = document.querySelector(s);"
        "  return [s, n ? n.getBoundingClientRect().height : 0]; }));",
        selectors,
    )
    return found


def show_seats(stdout: str) -> list[str]:
    """The SEAT column of ``sloopctl show RUN``'s table of a panel's reviewers."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Reviewers of"))
    seats = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        seats.append(line.split()[0])
    return seats


def test_a_settled_runs_log_controls_say_what_they_show(bench: Bench, tmp_path: Path) -> None:
    install_probe(bench)

    def seat(name: str, verdict: str) -> list[str]:
        """A seat that says who it is, then reports its verdict."""
        steps = [{"do": "ctl", "key": "verdict", "argv": ["verdict", verdict, "--reason", name]}]
        probe = probe_argv(bench, bench.flag(f"seat-{name}.json"), steps)
        return ["sh", "-c", f'echo "{name} seat speaking"; exec "$0" "$@"', *probe]

    events = CLAUDE_STREAM.read_text(encoding="utf-8").splitlines()
    said = [part for line in events for part in ("--say", line)]
    flow: list[dict[str, Any]] = [
        {"name": "implement", "action": "agent", "command": bench.argv(*said)},
        {
            "name": "review",
            "action": "agent",
            "result_check": "panel",
            "quorum": 1,
            "reviewers": [
                {"target": "careful", "command": seat("careful", "pass")},
                {"target": "strict", "command": seat("strict", "fail")},
            ],
        },
    ]  # no merge stage: the run settles needs_review
    bench.setup(
        sloop_toml(bench.argv(), flows={"panel": flow}), {"p": ticket_text("P", flow="panel")}
    )
    bench.start()
    bench.post("p")
    run = bench.wait_run("p#1")
    assert run["state"] == "needs_review", run
    rid = run["id"]
    rendered = sloopctl(bench, "logs", rid, "--all")
    raw = sloopctl(bench, "logs", rid, "--all", "--raw")
    assert rendered.returncode == 0, rendered.stderr
    assert raw.returncode == 0, raw.stderr
    assert rendered.stdout != raw.stdout  # the agent's JSON is rendered
    shown = sloopctl(bench, "show", rid)
    assert shown.returncode == 0, shown.stderr
    with (
        gateway(socket_of(bench), tmp_path / "token", "--allow-actions") as web,
        chromium(1200, 1000) as driver,
    ):
        # Download: what the page shows, or raw as the other choice.
        status, headers, body = web.request("GET", f"/api/log?run={rid}")
        assert status == 200
        assert headers["Content-Disposition"] == f'attachment; filename="{rid}.log"'
        assert body.decode() == rendered.stdout
        status, headers, body = web.request("GET", f"/api/log?run={rid}&raw=1")
        assert status == 200
        assert headers["Content-Disposition"] == f'attachment; filename="{rid}.raw.log"'
        assert body.decode() == raw.stdout

        driver.get(web.url)
        # The needs_review run's Needs attention row: its ways out.
        row = f'#attention tr[data-run="{rid}"]'
        wait_for(driver, lambda d: verbs(d, row) == ["resolve", "resolve", "run"])
        screenshot(driver, tmp_path, "attention-ways-out")
        # Dismiss asks first, with a reason; cancelled, nothing reaches the daemon.
        driver.find_element("css selector", f"{row} button.action-resolve-dismissed").click()
        wait_for(driver, dialog_open)
        driver.find_element("css selector", "#confirm-reason").send_keys("done in #412 instead")
        screenshot(driver, tmp_path, "dismiss-dialog")
        driver.find_element("css selector", "dialog.confirm .confirm-cancel").click()
        wait_for(driver, lambda d: not dialog_open(d))
        assert bench.show_run(rid)["state"] == "needs_review"  # type: ignore[index]
        driver.get(f"{web.base}/run/{rid}")
        wait_for(driver, has_text("#log", "done (success)"))
        assert verbs(driver, "main") == ["resolve", "resolve", "run"]
        # Settled: nothing runs, so the default is every stage, said so.
        assert "(running stage)" not in options(driver)
        assert options(driver)[0] == "(all stages)"
        select = driver.find_element("css selector", "#log-filter")
        assert select.get_attribute("value") == "(all stages)"
        assert seat_filter_shown(driver)  # a panel ran among every stage
        href = driver.find_element("css selector", "#log-download").get_attribute("href")
        assert href.endswith(f"/api/log?run={rid}")
        raw_href = driver.find_element("css selector", "#log-download-raw").get_attribute("href")
        assert raw_href.endswith(f"/api/log?run={rid}&raw=1")
        # Scrolled up in a log that cannot grow: no "Jump to latest".
        driver.execute_script("document.getElementById('log').scrollTop = 0;")
        driver.execute_script("document.getElementById('log').dispatchEvent(new Event('scroll'));")
        assert driver.execute_script("return document.getElementById('log-jump').hidden;")
        # The Seat filter only for a stage with seats.
        from selenium.webdriver.support.ui import Select

        Select(select).select_by_value("implement#1")
        wait_for(driver, has_text("#log-status", "Output of implement#1"))
        assert not seat_filter_shown(driver)
        Select(driver.find_element("css selector", "#log-filter")).select_by_value("review#1")
        wait_for(driver, has_text("#log-status", "Output of review#1"))
        wait_for(driver, seat_filter_shown)
        # Seats numbered as `sloopctl show` numbers them: the panel table and the filter.
        cli_seats = show_seats(shown.stdout)
        page_seats = [
            a.text.removeprefix("seat ")
            for a in driver.find_elements("css selector", ".panel tbody a")
        ]
        assert page_seats == cli_seats, (page_seats, shown.stdout)
        filter_seats = driver.execute_script(
            "return [...document.querySelectorAll('#log-seat option')].slice(1)"
            ".map(o => o.textContent.split(' ')[1]);"
        )
        assert filter_seats == cli_seats
        screenshot(driver, tmp_path, "settled-log")

        # A phone: the log's controls are 44 px targets; the prefix is shorter.
        driver.set_window_size(390, 844)
        driver.get(f"{web.base}/run/{rid}?stage=all")
        wait_for(driver, lambda d: d.execute_script("return innerWidth") <= 390)
        wait_for(driver, has_text("#log", "careful seat speaking"))
        found = heights(
            driver,
            [
                "#log-filter",
                "label:has(#log-raw)",
                "#log-download",
                "#log-download-raw",
                "label:has(#log-seat)",
            ],
        )
        assert all(h >= 44 for h in found.values()), found
        prefixes = driver.execute_script(
            "return [...document.querySelectorAll('#log .ll-row:not(.ll-raw) .ll-where')]"
            ".filter(n => n.getClientRects().length)"
            ".map(n => getComputedStyle(n, '::before').content.replace(/^\"|\"$/g, ''));"
        )
        assert "[impl#1 out]" in prefixes, prefixes[:5]
        assert f"[review#1 s{cli_seats[1]} out]" in prefixes, prefixes
        # The whole prefix stays on hover, and in the page's text (the terminal's line).
        assert any(line.startswith("[implement#1 stdout] ") for line in shown_lines(driver))
        assert "[implement#1 stdout]" in content(driver, "#log")
        # Nothing hidden is drawn by the phone's rules (a settled log has no "Jump").
        assert not driver.find_element("css selector", "#log-jump").is_displayed()
        driver.execute_script("document.querySelector('.log-controls').scrollIntoView();")
        screenshot(driver, tmp_path, "settled-log-phone")
        assert console_errors(driver) == []

        # Dismissed from its page, through the real daemon: it reads resolved, offers
        # Run again only, and leaves Needs attention.
        driver.set_window_size(1200, 1000)
        driver.get(f"{web.base}/run/{rid}")
        wait_for(driver, lambda d: verbs(d, "main") == ["resolve", "resolve", "run"])
        driver.find_element("css selector", "main button.action-resolve-dismissed").click()
        wait_for(driver, dialog_open)
        driver.find_element("css selector", "#confirm-reason").send_keys("done in #412 instead")
        driver.find_element("css selector", "dialog.confirm .confirm-go").click()
        # The page redraws with the resolution (the buttons that were used go with it),
        # or keeps the daemon's refusal beside the button.
        wait_for(
            driver,
            lambda d: (
                "resolved: dismissed (by " in text_of(d, "#resolution")
                or text_of(d, "main .action-result.bad")
            ),
        )
        assert text_of(driver, "main .action-result.bad") == ""
        assert "done in #412 instead" in text_of(driver, "#resolution")
        wait_for(driver, lambda d: verbs(d, "main") == ["run"])
        detail = bench.show_run(rid)
        assert detail is not None
        assert detail["state"] == "needs_review"
        assert detail["resolution"]["resolution"] == "dismissed"
        assert bench.ticket("p")["state"] == "failed"
        assert rid not in {run["id"] for run in bench.dashboard()["attention"]}
        driver.get(web.url)
        wait_for(driver, has_text("#attention", "Nothing needs a person now."))
        assert console_errors(driver) == []


def test_a_stalled_run_says_stalled_and_an_aborted_one_shows_no_signal(
    bench: Bench, tmp_path: Path
) -> None:
    agent = bench.argv("--say", "about to hang", "--hang")
    # Silent for a second is a stall here.
    bench.setup(sloop_toml(agent, extra='stall_after = "1s"'), {"stuck": ticket_text("Stuck")})
    bench.start()
    bench.post("stuck")
    run = bench.wait_stage_running("stuck#1", "implement")
    rid, repo = run["id"], bench.repo.name
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        driver.get(web.url)
        driver.get(f"{web.base}/run/{rid}")
        wait_for(driver, has_text("#log", "about to hang"))
        wait_for(driver, lambda d: d.title == f"{rid} · stalled · {repo} — Sloop")
        wait_for(driver, has_text("h1", "stalled"))
        assert "running" not in text_of(driver, "h1")
        wait_for(driver, has_text(".outcome", "stalled"))
        screenshot(driver, tmp_path, "stalled-run")
        bench.ok("abort", {"run": rid})
        wait_for(driver, lambda d: d.title == f"{rid} · aborted · {repo} — Sloop")
        wait_for(driver, has_text("#log-status", "settled"))
        about = text_of(driver, "dl.fields")
        assert "-15" not in about, about
        assert re.search(r"Agent exit\s*— \(stopped by the abort\)", about), about
        screenshot(driver, tmp_path, "aborted-run")
        assert console_errors(driver) == []
        # The daemon's own line for the cut-short execution (sloopd/runs/records.py).
        log = content(driver, "#log")
        assert "execution 1 failed" not in log
        assert "execution 1 aborted" in log
