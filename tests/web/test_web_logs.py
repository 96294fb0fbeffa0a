"""A run's log on the web (and in ``sloopctl logs``), in a real headless Chromium.

Against a real daemon and gateway: an agent's Claude-style ``stream-json`` shown as
``sloopctl logs`` shows it, with a raw toggle; panel seats' lines tagged and
filtered; a 20,000-line run read from its first line and downloaded whole; the
follow that stops while the reader is scrolled up; the stage and seat filters in
the address; the feed reading on after a daemon restart.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_argv, sloopctl_env
from tests.support.web import (
    EventStream,
    chromium,
    console_errors,
    gateway,
    has_text,
    needs_browser,
    screenshot,
    socket_of,
    wait_for,
)

pytestmark = needs_browser

CLAUDE_STREAM = Path(__file__).parents[1] / "unit" / "streams" / "claude-success.jsonl"
# Every line of the log as the page shows it now: the rows of each visible record,
# rendered or raw as the toggle says (textContent: lines scrolled out of view too).
SHOWN_LINES = """
return [...document.querySelectorAll('#log .ll')].filter(l => !l.hidden).flatMap(l =>
  [...l.querySelectorAll('.ll-row')].filter(r => getComputedStyle(r).display !== 'none')
    .map(r => r.textContent));
"""
CURSORS = "return [...document.querySelectorAll('#log .ll')].map(l => l.dataset.cursor);"


def sloopctl(bench: Bench, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sloopctl_argv(socket_of(bench), *args),
        capture_output=True,
        text=True,
        env=sloopctl_env(),
        timeout=120,
    )


def printer(source: str) -> list[str]:
    """A command stage that runs ``source`` under the tests' interpreter."""
    return [sys.executable, "-c", source]


def content(driver: Any, css: str) -> str:
    """An element's text, scrolled out of view or not (Selenium's ``text`` is only what shows)."""
    found: str = driver.execute_script(
        "return document.querySelector(arguments[0])?.textContent ?? '';", css
    )
    return found


def gap_shown(driver: Any) -> bool:
    return bool(driver.execute_script("return !document.getElementById('log-gap').hidden;"))


def shown_lines(driver: Any) -> list[str]:
    lines: list[str] = driver.execute_script(SHOWN_LINES)
    return lines


def test_a_claude_stream_is_shown_as_sloopctl_logs_shows_it_with_a_raw_toggle(
    bench: Bench, tmp_path: Path
) -> None:
    events = CLAUDE_STREAM.read_text(encoding="utf-8").splitlines()
    options = [part for line in events for part in ("--say", line)]
    flow = [{"name": "implement", "action": "agent", "command": bench.argv(*options)}]
    bench.setup(
        sloop_toml(bench.argv(), flows={"claude": flow}),
        {"c": ticket_text("Claude speaks", flow="claude")},
    )
    bench.start()
    bench.post("c")
    run = bench.wait_run("c#1")
    cli = sloopctl(bench, "logs", run["id"])
    assert cli.returncode == 0, cli.stderr
    expected = cli.stdout.splitlines()
    assert any("→ Bash: " in line for line in expected)  # the command renders the stream
    assert any("done (success): " in line and "$0.0216" in line for line in expected)
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium(1200, 1000) as driver:
        driver.get(web.url)
        driver.get(f"{web.base}/run/{run['id']}?stage=all")
        wait_for(driver, has_text("#log", "done (success)"))
        wait_for(driver, lambda d: len(shown_lines(d)) == len(expected))
        # The same lines, word for word: one renderer, the command's.
        assert shown_lines(driver) == expected
        shown = "\n".join(shown_lines(driver))
        assert '{"type":"assistant"' not in shown
        assert "← [sloop/t/1 0be9161] add hello" in shown
        screenshot(driver, tmp_path, "claude-rendered")
        driver.find_element("css selector", "#log-raw").click()
        raw = wait_for(
            driver,
            lambda d: (
                "\n".join(shown_lines(d))
                if "raw" in d.find_element("css selector", "#log").get_attribute("class")
                else None
            ),
        )
        assert '{"type":"assistant"' in raw
        assert "→ Bash: " not in raw
        raw_cli = sloopctl(bench, "logs", run["id"], "--raw")
        assert shown_lines(driver) == raw_cli.stdout.splitlines()
        screenshot(driver, tmp_path, "claude-raw")
        # Agent text stays text: no element of the stream's making.
        assert driver.execute_script("return document.querySelectorAll('#log script').length") == 0
        assert console_errors(driver) == []


def test_panel_seats_tag_their_lines_and_the_filters_live_in_the_address(
    bench: Bench, tmp_path: Path
) -> None:
    flow: list[dict[str, Any]] = [
        {"name": "implement", "action": "agent", "command": bench.argv("--say", "implemented")},
        {
            "name": "review",
            "action": "agent",
            "result_check": "panel",
            "quorum": 1,
            "reviewers": [
                {"target": "careful", "command": bench.argv("--say", "careful seat speaking")},
                {"target": "strict", "command": bench.argv("--say", "strict seat speaking")},
            ],
        },
    ]
    bench.setup(
        sloop_toml(bench.argv(), flows={"panel": flow}), {"p": ticket_text("P", flow="panel")}
    )
    bench.start()
    bench.post("p")
    run = bench.wait_run("p#1")
    # The daemon's records name the seat as show names it (reviewers[].reviewer).
    page = bench.ok("logs", {"run": run["id"], "stage": "review#1"})
    seats = {r["text"]: r.get("reviewer") for r in page["records"] if r["stream"] == "stdout"}
    assert seats == {"careful seat speaking": 0, "strict seat speaking": 1}
    cli = sloopctl(bench, "logs", run["id"], "--stage", "review#1")
    assert cli.returncode == 0, cli.stderr
    assert "[review#1 seat 0 stdout] careful seat speaking" in cli.stdout.splitlines()
    assert "[review#1 seat 1 stdout] strict seat speaking" in cli.stdout.splitlines()
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium(1200, 1000) as driver:
        driver.get(web.url)
        # A shared link: one execution, one seat.
        driver.get(f"{web.base}/run/{run['id']}?stage=review%231&seat=1")
        wait_for(driver, has_text("#log-status", "Output of review#1"))
        wait_for(
            driver, lambda d: "[review#1 seat 1 stdout] strict seat speaking" in shown_lines(d)
        )
        assert not any("careful" in line for line in shown_lines(driver))
        assert all(" seat 1 " in line for line in shown_lines(driver))
        assert driver.find_element("css selector", "#log-filter").get_attribute("value") == (
            "review#1"
        )
        assert driver.find_element("css selector", "#log-seat").get_attribute("value") == "1"
        screenshot(driver, tmp_path, "seat-1")
        # Every seat: both tagged; the address follows the choice.
        from selenium.webdriver.support.ui import Select

        Select(driver.find_element("css selector", "#log-seat")).select_by_value("")
        wait_for(
            driver, lambda d: "[review#1 seat 0 stdout] careful seat speaking" in shown_lines(d)
        )
        assert "seat=" not in driver.current_url
        assert "stage=review%231" in driver.current_url
        Select(driver.find_element("css selector", "#log-filter")).select_by_value("implement#1")
        wait_for(driver, has_text("#log-status", "Output of implement#1"))
        wait_for(driver, lambda d: "stage=implement%231" in d.current_url)
        wait_for(driver, lambda d: "[implement#1 stdout] implemented" in shown_lines(d))
        driver.execute_script("window.__beforeReload = true;")
        driver.refresh()
        wait_for(driver, has_text("#log-status", "Output of implement#1"))
        assert driver.execute_script("return window.__beforeReload === undefined;")
        wait_for(driver, lambda d: "[implement#1 stdout] implemented" in shown_lines(d))
        assert not any("seat" in line for line in shown_lines(driver))
        screenshot(driver, tmp_path, "reloaded-filter")
        assert console_errors(driver) == []


LINES = 20_000


def test_a_20000_line_run_is_read_from_its_first_line_and_downloaded_whole(
    bench: Bench, tmp_path: Path
) -> None:
    source = f"for i in range(1, {LINES + 1}): print(f'line {{i}}')"
    flow = [{"name": "flood", "action": "command", "command": printer(source)}]
    bench.setup(
        sloop_toml(bench.argv(), flows={"flood": flow}), {"f": ticket_text("F", flow="flood")}
    )
    bench.start()
    bench.post("f")
    run = bench.wait_run("f#1", timeout=120)
    records = bench.log_lines(run["id"])
    assert [text for _, _, stream, text in records if stream == "stdout"] == [
        f"line {i}" for i in range(1, LINES + 1)
    ]
    everything = sloopctl(bench, "logs", run["id"], "--all", "--raw")
    assert everything.returncode == 0, everything.stderr
    assert len(everything.stdout.splitlines()) == len(records)
    assert everything.stdout.splitlines()[0] == "[flood#1 system] " + records[0][3]
    refused = sloopctl(bench, "logs", run["id"], "--all", "--tail", "5")
    assert refused.returncode == 2
    assert "--all" in refused.stderr
    with gateway(socket_of(bench), tmp_path / "token") as web:
        # The download: the whole selection, streamed (chunked, no length), and
        # exactly what `sloopctl logs --all --raw` prints.
        status, headers, body = web.request("GET", f"/api/log?run={run['id']}")
        assert status == 200
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert headers["Content-Disposition"] == f'attachment; filename="{run["id"]}.log"'
        assert headers.get("Transfer-Encoding") == "chunked"
        assert "Content-Length" not in headers
        assert body.decode() == everything.stdout
        status, headers, one = web.request("GET", f"/api/log?run={run['id']}&stage=flood%231")
        assert status == 200
        assert headers["Content-Disposition"] == f'attachment; filename="{run["id"]}-flood-1.log"'
        assert one == body  # every record is the one execution's
        # The records after a cursor, exactly as many as asked, each cursor reading on.
        status, _, first = web.request("GET", f"/api/logs?run={run['id']}&limit=250")
        assert status == 200
        page = orjson.loads(first)["data"]
        assert [r["text"] for r in page["records"]] == [r[3] for r in records[:250]]
        assert page["complete"] is False
        after = page["next_cursor"]
        assert after == page["records"][-1]["cursor"]
        status, _, second = web.request("GET", f"/api/logs?run={run['id']}&after={after}")
        page = orjson.loads(second)["data"]
        assert [r["text"] for r in page["records"]] == [r[3] for r in records[250:750]]
        assert web.request("GET", f"/api/logs?run={run['id']}", cookie=False)[0] == 401
        assert web.request("GET", f"/api/log?run={run['id']}", cookie=False)[0] == 401
        assert web.request("GET", "/api/log?run=R999")[0] == 404
        with chromium(1200, 1000) as driver:
            driver.get(web.url)
            driver.get(f"{web.base}/run/{run['id']}")
            wait_for(driver, has_text("#log", f"line {LINES}"))
            # The newest 500 first, and what is before them counted.
            assert len(driver.execute_script(CURSORS)) == 500
            wait_for(
                driver, lambda d: f"{len(records) - 500} earlier records" in content(d, "#log-gap")
            )
            href = driver.find_element("css selector", "#log-download").get_attribute("href")
            assert href == f"{web.base}/api/log?run={run['id']}"
            driver.find_element("css selector", "#log-earlier").click()
            wait_for(driver, lambda d: shown_lines(d)[0] == everything.stdout.splitlines()[0])
            assert "[flood#1 stdout] line 1" in shown_lines(driver)
            screenshot(driver, tmp_path, "first-lines")
            clicks = 1
            while gap_shown(driver):
                count = len(driver.execute_script(CURSORS))
                driver.find_element("css selector", "#log-earlier").click()
                wait_for(
                    driver,
                    lambda d, n=count: len(d.execute_script(CURSORS)) > n or not gap_shown(d),
                )
                clicks += 1
                assert clicks <= LINES // 500 + 2
            # The whole log, each record once, in order: the download's lines.
            cursors = driver.execute_script(CURSORS)
            assert len(cursors) == len(set(cursors)) == len(records)
            assert [int(c) for c in cursors] == sorted(int(c) for c in cursors)
            driver.find_element("css selector", "#log-raw").click()
            assert shown_lines(driver) == everything.stdout.splitlines()
            assert console_errors(driver) == []


FOLLOWED = """
import os, sys, time
def wait(path):
    while not os.path.exists(path):
        time.sleep(0.02)
for i in range(1, 201): print(f"early {i}", flush=True)
wait(sys.argv[1])
for i in range(1, 51): print(f"later {i}", flush=True)
wait(sys.argv[2])
for i in range(1, 51): print(f"last {i}", flush=True)
"""


def test_the_log_stops_following_while_the_reader_is_scrolled_up(
    bench: Bench, tmp_path: Path
) -> None:
    command = [*printer(FOLLOWED), bench.flag("more"), bench.flag("last")]
    flow = [{"name": "talk", "action": "command", "command": command}]
    bench.setup(
        sloop_toml(bench.argv(), flows={"talk": flow}), {"t": ticket_text("T", flow="talk")}
    )
    bench.start()
    bench.post("t")
    run = bench.wait_stage_running("t#1", "talk")
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium(1200, 1000) as driver:
        driver.get(web.url)
        driver.get(f"{web.base}/run/{run['id']}")
        wait_for(driver, lambda d: "[talk#1 stdout] early 200" in shown_lines(d))
        box = driver.find_element("css selector", "#log")
        bottom = "const b = document.getElementById('log');"
        at_bottom = bottom + "return b.scrollHeight - b.scrollTop - b.clientHeight <= 8;"
        wait_for(driver, lambda d: d.execute_script(at_bottom))  # following the newest
        assert not driver.find_element("css selector", "#log-jump").is_displayed()
        # The reader scrolls up to read: the view stays where they are.
        driver.execute_script("arguments[0].scrollTop = 300;", box)
        wait_for(driver, lambda d: d.find_element("css selector", "#log-jump").is_displayed())
        bench.release("more")
        wait_for(driver, lambda d: "[talk#1 stdout] later 50" in shown_lines(d))
        assert driver.execute_script("return arguments[0].scrollTop;", box) == 300
        wait_for(driver, has_text("#log-jump", "(50 new)"))
        screenshot(driver, tmp_path, "scrolled-up")
        # Jump to latest: at the bottom, and following again.
        driver.find_element("css selector", "#log-jump").click()
        wait_for(driver, lambda d: d.execute_script(at_bottom))
        wait_for(driver, lambda d: not d.find_element("css selector", "#log-jump").is_displayed())
        bench.release("last")
        wait_for(driver, lambda d: "[talk#1 stdout] last 50" in shown_lines(d))
        wait_for(driver, lambda d: d.execute_script(at_bottom))
        assert not driver.find_element("css selector", "#log-jump").is_displayed()
        bench.wait_run(run["id"])
        assert console_errors(driver) == []


RESTARTED = """
import os, sys, time
for i in range(1, 102): print(f"line {i}", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
"""


def test_a_log_feed_reads_on_after_a_daemon_restart_without_losing_a_line(
    bench: Bench, tmp_path: Path
) -> None:
    command = [*printer(RESTARTED), bench.flag("never")]
    flow = [{"name": "wait", "action": "command", "command": command}]
    bench.setup(
        sloop_toml(bench.argv(), flows={"wait": flow}), {"w": ticket_text("W", flow="wait")}
    )
    bench.start()
    bench.post("w")
    run = bench.wait_stage_running("w#1", "wait")
    with gateway(socket_of(bench), tmp_path / "token") as web:
        stream = EventStream(web, f"/sse/logs?run={run['id']}")
        seen: list[dict[str, Any]] = []

        def printed(name: str, data: Any) -> bool:
            if name == "records":
                seen.extend(data["records"])
            return any(r["text"] == "line 101" for r in seen)

        stream.until(printed)
        assert bench.stop() == 0
        bench.start()
        stream.until(lambda name, data: printed(name, data) and name == "daemon" and data["ok"])
        # The run continues after the restart (issue 38): its stage waits again; end it.
        bench.ok("abort", {"run": run["id"]})
        settled = bench.wait_run(run["id"])
        stream.until(lambda name, data: printed(name, data) is not None and name == "end")
        stream.close()
        cursors = [int(r["cursor"]) for r in seen]
        assert cursors == sorted(set(cursors))  # nothing twice, nothing out of order
        everything = bench.log_lines(run["id"])
        assert len(seen) == len(everything)  # nothing lost either
        assert seen[0]["text"] == everything[0][3]
        assert settled["terminal"]
        with chromium() as driver:
            driver.get(web.url)
            driver.get(f"{web.base}/run/{run['id']}")
            wait_for(driver, lambda d: "[wait#1 stdout] line 1" in shown_lines(d))
            assert len(shown_lines(driver)) == len(everything)
            assert not gap_shown(driver)
