"""Finding what needs a person on the web view: the dashboard's "Needs attention",
/runs, deep links, title search, a dashboard of 200 tickets, accessibility, the
repository's name and an aborted stage (issue 26). A real daemon, the real gateway,
headless Chromium, as in test_web_browser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from tests.support.agents import Bench, sloop_toml, ticket_text
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

DASH = "\N{EN DASH}"  # the page writes a range of rows with it

# A flow without a merge stage: its run settles needs_review.
REVIEW_FLOW = [{"name": "check", "action": "command", "command": ["true"]}]
BROKEN_FLOW = [{"name": "check", "action": "command", "command": ["false"]}]


def css(driver: Any, selector: str) -> list[Any]:
    return list(driver.find_elements("css selector", selector))


def test_a_needs_review_run_stays_on_the_dashboard_after_20_more_settle(
    bench: Bench, tmp_path: Path
) -> None:
    agent = bench.argv("--write", "out-{run}.txt=from {run}")
    tickets = {
        "look": ticket_text("Look at this", flow="review"),
        "broken": ticket_text("Cannot pass", flow="broken"),
        "later": ticket_text("Not yet"),
    }
    tickets.update({f"quick-{n}": ticket_text(f"Quick change {n}") for n in range(19)})
    flows = {"review": REVIEW_FLOW, "broken": BROKEN_FLOW}
    bench.setup(sloop_toml(agent, parallel=2, flows=flows), tickets)
    bench.start()
    bench.post("look")
    review = bench.wait_run("look#1")
    assert review["state"] == "needs_review"
    bench.post("later", hold=True)
    # 20 more runs settle: one fails, 19 merge.
    bench.post("broken")
    failed = bench.wait_run("broken#1")
    assert failed["state"] == "failed"
    for n in range(19):
        bench.post(f"quick-{n}")
    settled = [bench.wait_run(f"quick-{n}#1") for n in range(19)]
    assert {run["state"] for run in settled} == {"merged"}
    board = bench.dashboard()
    assert review["id"] not in {run["id"] for run in board["recent"]}  # aged out of recent
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium(1440, 900) as driver:
        # /api/runs relays the daemon's runs verb; a state it does not know is left out.
        status, _, body = web.request("GET", "/api/runs?state=needs_review&limit=5")
        assert status == 200
        assert orjson.loads(body)["data"]["total"] == 1
        assert orjson.loads(body)["data"]["limit"] == 5
        _, _, body = web.request("GET", "/api/runs?state=running")
        assert orjson.loads(body)["data"]["state"] is None
        assert orjson.loads(body)["data"]["total"] == 21
        driver.get(web.url)
        wait_for(driver, has_text("#attention", review["id"]))
        attention = text_of(driver, "#attention")
        assert "needs review" in attention
        assert "look#1" in attention
        assert "broken#1" in attention  # failed
        # A held ticket waits by intent: counted apart, not a row (issue 33).
        assert "Not yet" not in attention
        assert "1 ticket held" in text_of(driver, "#attention-held")
        assert "Not yet" in text_of(driver, "#tickets")
        for run in settled:
            assert run["id"] not in attention  # merged runs need nobody
        elsewhere = driver.execute_script(
            "return [...document.querySelectorAll('main a.run-link')]"
            ".filter(a => !a.closest('#attention')).map(a => a.getAttribute('href'));"
        )
        assert f"/run/{review['id']}" not in elsewhere
        assert len(elsewhere) == 10
        # The sections that need a person come before the long lists.
        order = driver.execute_script(
            "return [...document.querySelectorAll('main section h2')].map(h => h.textContent);"
        )
        assert order.index(next(t for t in order if t.startswith("Needs attention"))) < min(
            order.index(next(t for t in order if t.startswith("Tickets"))),
            order.index("Recent runs"),
        )
        # "10 of 21 settled runs" is a link to /runs; the totals count in words that agree.
        assert "10 of 21 settled runs" in text_of(driver, "#recent-all")
        assert text_of(driver, "#settled-link") == "21 settled runs"
        screenshot(driver, tmp_path, "dashboard-needs-attention")
        css(driver, "#recent-all")[0].click()
        wait_for(driver, has_text("#runs-count", "of 21 settled runs"))
        assert urlsplit(driver.current_url).path == "/runs"
        # Paging: 21 runs, 10 a page: the oldest (the needs_review one) is on page 3.
        driver.get(f"{web.base}/runs?limit=10")
        wait_for(driver, has_text("#runs-count", f"1{DASH}10 of 21 settled runs"))
        assert "look#1" not in text_of(driver, "#runs-list table")
        css(driver, "a[rel=next]")[0].click()
        wait_for(driver, has_text("#runs-count", f"11{DASH}20 of 21"))
        css(driver, "a[rel=next]")[0].click()
        wait_for(driver, has_text("#runs-count", f"21{DASH}21 of 21"))
        assert "look#1" in text_of(driver, "#runs-list table")
        assert css(driver, "a[rel=next]") == []
        # The state filter: only the needs_review run, "1 needs review run" (no plural s).
        driver.find_element("css selector", 'a.filter-link[href*="state=needs_review"]').click()
        wait_for(driver, has_text("#runs-count", f"1{DASH}1 of 1 needs review run"))
        listed = text_of(driver, "#runs-list table")
        assert "look#1" in listed
        assert "quick-" not in listed
        assert "broken#1" not in listed
        assert parse_qs(urlsplit(driver.current_url).query)["state"] == ["needs_review"]
        driver.set_window_size(1440, 900)
        driver.get(f"{web.base}/runs")
        wait_for(driver, has_text("#runs-count", "of 21 settled runs"))
        screenshot(driver, tmp_path, "runs-page")
        assert console_errors(driver) == []


def test_a_timeline_bar_is_a_deep_link_that_survives_a_reload(bench: Bench, tmp_path: Path) -> None:
    agent = bench.argv("--say", "writing", "--write", "greeting.txt=hello from {run}")
    bench.setup(sloop_toml(agent), {"greet": ticket_text("Add a greeting")})
    bench.start()
    bench.post("greet")
    merged = bench.wait_run("greet#1")
    assert merged["state"] == "merged"
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium(1000, 1000) as driver:
        driver.get(web.url)
        driver.get(f"{web.base}/run/{merged['id']}")
        wait_for(driver, has_text("#timeline", "sync#1"))
        bars = css(driver, "#timeline a.bar")
        assert len(bars) == 3
        sync_bar = next(b for b in bars if "sync#1" in (b.get_attribute("title") or ""))
        sync_bar.click()
        wait_for(driver, lambda d: "stage=" in d.current_url)
        wanted = f"/run/{merged['id']}?stage=sync%231"
        assert driver.current_url.endswith(wanted)
        wait_for(driver, has_text("#timeline", "merge#1"))
        driver.refresh()  # the address is the page: a reload keeps it, and draws the run
        wait_for(driver, has_text("#timeline", "merge#1"))
        assert driver.current_url.endswith(wanted)
        assert merged["alias"] in text_of(driver, "h1")
        # The stage executions' rows and the timeline's labels link the same way.
        rows = [a.get_attribute("href") for a in css(driver, "table a.chip-link")]
        assert any(href.endswith("?stage=implement%231") for href in rows), rows
        labels = [a.get_attribute("href") for a in css(driver, "#timeline a.tl-label")]
        assert any(href.endswith("?stage=merge%231") for href in labels), labels
        # And the ticket page's stage chips.
        driver.get(f"{web.base}/ticket/{merged['ticket']}")
        wait_for(driver, lambda d: css(d, "a.chip-link"))
        chips = [a.get_attribute("href") for a in css(driver, "a.chip-link")]
        assert f"{web.base}/run/{merged['id']}?stage=implement%231" in chips
        assert console_errors(driver) == []


def test_search_finds_titles_and_goes_straight_to_an_exact_match(
    bench: Bench, tmp_path: Path
) -> None:
    bench.setup(
        sloop_toml(bench.argv()),
        {
            "fix-login": ticket_text("Repair the sign-in form"),
            "docs": ticket_text("Explain the sign-in settings"),
            "other": ticket_text("Something else"),
        },
    )
    bench.start()
    login = bench.post("fix-login", manual=True)["ticket"]
    docs = bench.post("docs", manual=True)["ticket"]
    other = bench.post("other", manual=True)["ticket"]
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        driver.get(web.url)
        wait_for(driver, has_text("main", "Repair the sign-in form"))
        # Words of a title, which no id or name contains.
        box = driver.find_element("css selector", "#q")
        box.send_keys("sign-in")
        box.submit()
        wait_for(driver, has_text("main", "Tickets matching"))
        found = text_of(driver, "main table")
        assert login["id"] in found
        assert docs["id"] in found
        assert other["id"] not in found
        # An exact name: straight to the ticket's page, not a page with one link.
        driver.find_element("css selector", "#q").clear()
        driver.find_element("css selector", "#q").send_keys("fix-login")
        driver.find_element("css selector", "#q").submit()
        wait_for(driver, lambda d: urlsplit(d.current_url).path == f"/ticket/{login['id']}")
        wait_for(driver, has_text("#ticket-title", "Repair the sign-in form"))
        # An exact id too.
        driver.get(f"{web.base}/search?q={other['id']}")
        wait_for(driver, lambda d: urlsplit(d.current_url).path == f"/ticket/{other['id']}")
        assert console_errors(driver) == []


def test_200_tickets_fit_within_two_desktop_screens(bench: Bench, tmp_path: Path) -> None:
    count = 200
    tickets = {f"t-{n:03}": ticket_text(f"Ticket number {n}") for n in range(count)}
    bench.setup(sloop_toml(bench.argv()), tickets)
    bench.start()
    bench.ok("pause", {"reason": "two hundred tickets wait"})  # they queue, none runs
    for n in range(count):
        bench.post(f"t-{n:03}")
    assert len(bench.dashboard()["tickets"]) == count
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium(1440, 900) as driver:
        driver.get(web.url)
        wait_for(driver, has_text("main", f"Show all {count} tickets"))
        height = driver.execute_script("return document.documentElement.scrollHeight;")
        assert height <= 1800, height
        screenshot(driver, tmp_path, "dashboard-200")
        ticket_rows = "main section:has(#more-tickets) tbody tr"
        shown = len(css(driver, ticket_rows))
        assert 0 < shown < count
        css(driver, "#more-tickets")[0].click()
        wait_for(driver, lambda d: len(css(d, ticket_rows)) == count)
        assert css(driver, "#more-tickets")[0].get_attribute("aria-expanded") == "true"
        css(driver, "#more-tickets")[0].click()
        wait_for(driver, lambda d: len(css(d, ticket_rows)) == shown)
        assert console_errors(driver) == []


def test_live_regions_skip_link_and_touch_targets(bench: Bench, tmp_path: Path) -> None:
    agent = bench.argv("--say", "working", "--wait-for", bench.flag("done"))
    # Silent for a second is a stall here: the run in flight needs attention too.
    bench.setup(sloop_toml(agent, extra='stall_after = "1s"'), {"slow": ticket_text("Slow")})
    bench.start()
    bench.post("slow")
    run = bench.wait_stage_running("slow#1", "implement")
    with (
        gateway(socket_of(bench), tmp_path / "token", "--allow-actions") as web,
        chromium(1440, 900) as driver,
    ):
        driver.get(web.url)
        wait_for(driver, has_text("main", "implement#1"))
        wait_for(driver, has_text("#attention", "stalled"))
        assert "implement#1 is silent" in text_of(driver, "#attention")
        # Live regions by attribute or by role (status, log and alert are live too); the
        # action buttons' answers become one only once a button is used.
        live = (
            "return [...document.querySelectorAll("
            "'[aria-live], [role=status], [role=log], [role=alert]')].map(n => n.id);"
        )
        assert driver.execute_script(live) == ["link-state"]
        main_live = "return document.querySelector('main').hasAttribute('aria-live');"
        assert driver.execute_script(main_live) is False
        driver.get(f"{web.base}/run/{run['id']}")
        wait_for(driver, has_text("#log", "working"))
        assert sorted(driver.execute_script(live)) == ["link-state", "log"]
        # The skip link: the first stop of the tab order, and it moves the focus to main.
        first = driver.execute_script("return document.querySelector('a, button, input');")
        assert first.get_attribute("class") == "skip-link"
        driver.find_element("css selector", "body").send_keys("\ue004")  # Tab
        focused = driver.execute_script("return document.activeElement.className;")
        assert focused == "skip-link"
        driver.execute_script("document.activeElement.click();")
        assert urlsplit(driver.current_url).fragment == "page"
        # A phone: every link and button of the header and the action bars is 44 px.
        driver.set_window_size(390, 844)
        for page in ("/", f"/run/{run['id']}", "/runs"):
            driver.get(f"{web.base}{page}")
            wait_for(driver, lambda d: d.execute_script("return innerWidth") <= 390)
            wait_for(driver, lambda d: "Loading" not in text_of(d, "main"))
            if page == "/":
                wait_for(driver, lambda d: css(d, ".actions button"))
            heights = driver.execute_script(
                "return [...document.querySelectorAll("
                "'header a, header button, header input, .actions button, .navbar a')]"
                ".filter(n => n.getClientRects().length)"
                ".map(n => [n.textContent.trim() || n.id, n.getBoundingClientRect().height]);"
            )
            assert heights, page
            small = [(name, h) for name, h in heights if h < 44]
            assert small == [], (page, small)
        screenshot(driver, tmp_path, "phone-targets")
        bench.release("done")
        bench.wait_run(run["id"])
        assert console_errors(driver) == []


def test_the_repository_and_the_runs_state_name_the_tab_and_an_abort_is_drawn_as_one(
    bench: Bench, tmp_path: Path
) -> None:
    agent = bench.argv("--say", "about to hang", "--hang")
    bench.setup(sloop_toml(agent), {"stuck": ticket_text("Never finishes")})
    bench.start()
    bench.post("stuck")
    run = bench.wait_stage_running("stuck#1", "implement")
    repo = bench.repo.name
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        assert web.session()["repo"] == repo
        driver.get(web.url)
        wait_for(driver, has_text("#repo-name", repo))
        assert driver.title == f"Dashboard · {repo} — Sloop"
        driver.get(f"{web.base}/run/{run['id']}")
        wait_for(driver, lambda d: d.title == f"{run['id']} · running · {repo} — Sloop")
        driver.execute_script("window.__stillTheSamePage = true;")
        bench.ok("abort", {"run": run["id"]})
        # The title follows the run live, and the cut-short stage is drawn as aborted.
        wait_for(driver, lambda d: d.title == f"{run['id']} · aborted · {repo} — Sloop")
        assert driver.execute_script("return window.__stillTheSamePage === true;")
        wait_for(driver, has_text("#timeline", "■ aborted"))
        timeline = text_of(driver, "#timeline")
        assert "exit -15" not in timeline
        # Nor is the signal shown as the execution's exit in the table of executions.
        wait_for(driver, has_text("table", "aborted"))
        assert "-15" not in text_of(driver, "table")
        assert css(driver, "#timeline .bar.state-aborted")
        assert css(driver, "#timeline .bar.state-failed") == []
        row = driver.find_element("css selector", '#timeline .tl-row[data-stage="implement#1"]')
        assert row.get_attribute("data-state") == "aborted"
        screenshot(driver, tmp_path, "aborted-run")
        detail = bench.show_run(run["id"])
        assert detail is not None
        implement = next(s for s in detail["stages"] if s["attempt"] == 1)
        assert implement["state"] == "failed"
        assert implement["aborted"] is True
        assert all(s["aborted"] is False for s in detail["stages"] if s is not implement)
        assert console_errors(driver) == []
