"""The run page's details of issue 26 in a real headless Chromium, real daemon and gateway.

The Verdict column leads with the verdict (pass or fail, confidence, advisory, the
reason) and names its source after it; stages a settled run never reached read "not
reached", not "pending"; tokens read as ``sloopctl show`` writes them (one rule,
sloopctl/usage_text.py, checked here against the page's own ``usageText``); an
aborted run links to the ticket's attempt that followed it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sloopctl.usage_text import usage_text
from tests.support.agents import Bench, install_probe, probe_argv, sloop_toml, ticket_text
from tests.support.usage_stream import SPEC, line
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
from tests.unit.test_sloopctl_details import COUNTS, USAGES

pytestmark = needs_browser
ROOT = Path(__file__).resolve().parents[2]


def cell(driver: Any, execution: str, column: str) -> Any:
    """The ``column`` cell of the stage-executions row of ``execution`` (``review#1``)."""
    from selenium.webdriver.common.by import By

    for row in driver.find_elements(By.CSS_SELECTOR, "table.rows tbody tr"):
        first = row.find_elements(By.CSS_SELECTOR, 'td[data-label="Execution"]')
        # The chip reads "<shape> review#1", with " · not reached" on an unreached row.
        if first and first[0].text.split(" ·")[0].split()[-1] == execution:
            return row.find_element(By.CSS_SELECTOR, f'td[data-label="{column}"]')
    raise AssertionError(f"no execution row {execution}")


def test_the_verdict_leads_unreached_stages_say_so_and_tokens_read_as_in_the_cli(
    bench: Bench, tmp_path: Path
) -> None:
    install_probe(bench)
    bench.env["PYTHONPATH"] = str(ROOT)  # the daemon imports the test's usage parser

    def seat(verdict: str, reason: str, confidence: str) -> list[str]:
        argv = ["verdict", verdict, "--reason", reason, "--confidence", confidence]
        steps = [{"do": "ctl", "key": "verdict", "argv": argv}]
        return probe_argv(bench, bench.flag(f"seat-{verdict}.json"), steps)

    spend = line(52_245, 1800, 40_211, 0.0421)
    flow: list[dict[str, Any]] = [
        {"name": "implement", "action": "agent", "command": bench.argv("--say", spend)},
        {
            "name": "review",
            "action": "agent",
            "result_check": "panel",
            "quorum": 2,
            "reviewers": [
                {"target": "careful", "command": seat("pass", "reads well", "high")},
                {"target": "strict", "command": seat("fail", "needs a test", "low")},
            ],
        },
        {"name": "sync", "action": "sync"},
        {"name": "merge", "action": "ff_only"},
    ]
    config = sloop_toml(bench.argv(), flows={"panel": flow})
    config = config.replace("[agent]\n", f'[agent]\nstream = "{SPEC}"\n')
    bench.setup(config, {"p": ticket_text("P", flow="panel")})
    bench.start()
    bench.post("p")
    run = bench.wait_run("p#1")
    assert run["state"] == "failed", run
    stages = {(s["stage"], s["attempt"]): s for s in run["stages"]}
    assert stages[("sync", 0)]["unreached"] is True, stages
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium(1200, 1400) as driver:
        driver.get(web.url)
        driver.get(f"{web.base}/run/{run['id']}")
        wait_for(driver, has_text(".panel", "Panel of review#1"))

        # The verdict first, its source after it and apart.
        review = cell(driver, "review#1", "Verdict")
        word = review.find_element("css selector", ".verdict-word").text
        assert word.lower() == "fail"
        assert review.text.lower().startswith("fail")
        assert stages[("review", 1)]["reason"] in review.text
        source = review.find_element("css selector", ".verdict-source")
        assert source.text == "decided by the panel's quorum"
        assert review.text.endswith(source.text)  # secondary: last
        implement = cell(driver, "implement#1", "Verdict")
        assert implement.text.lower().startswith("pass")
        assert implement.find_element("css selector", ".verdict-source").text == (
            "decided by its exit code"
        )

        # Stages the run never reached.
        for name in ("sync", "merge"):
            assert "not reached" in cell(driver, name, "Execution").text
        assert "pending" not in text_of(driver, "table.rows")

        # Tokens: the same words as sloopctl show, on the row and for the run.
        usage = stages[("implement", 1)]["usage"]
        wanted = usage_text(usage)
        assert wanted == "52k in (40k cached), 1.8k out, $0.0421"
        assert cell(driver, "implement#1", "Usage").text == wanted
        assert text_of(driver, "#run-usage") == usage_text(run["usage"])
        # The page's usageText against the CLI's on the whole table of cuts.
        # (Nothing reported is "-" in a terminal's table and "—" on the page.)
        cases = [u for u, _ in USAGES if u is not None]
        cases += [{"input_tokens": n, "output_tokens": n} for n, _ in COUNTS]
        shown = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "import('/static/widgets.js').then((m) => done(arguments[0].map(m.usageText)));",
            cases,
        )
        assert shown == [usage_text(u) for u in cases]
        screenshot(driver, tmp_path, "verdicts")
        # The ticket's page reads its runs' unreached stages the same way.
        driver.get(f"{web.base}/ticket/{run['ticket']}")
        wait_for(driver, has_text("main", "p#1"))
        wait_for(driver, has_text(".strip", "sync · not reached"))
        assert "merge · not reached" in text_of(driver, ".strip")
        assert console_errors(driver) == []


def test_an_aborted_run_links_to_the_attempt_that_followed_it(bench: Bench, tmp_path: Path) -> None:
    waiting = bench.argv(
        "--say", "working on {run}", "--wait-for", bench.flag("go-{run}"), "--write", "t.txt={run}"
    )  # fmt: skip
    bench.setup(sloop_toml(waiting), {"t": ticket_text("T")})
    bench.start()
    bench.post("t")
    first = bench.wait_stage_running("t#1", "implement")
    bench.ok("abort", {"run": first["id"]})
    aborted = bench.wait_run(first["id"])
    assert aborted["state"] == "aborted", aborted
    assert aborted["followed_by"] is None
    bench.ok("ready", {"ref": "t"})  # the abort held it; its trigger is claimed again
    second = bench.wait_stage_running("t#2", "implement")
    # In flight, the stages ahead are only pending; settled, R1's never-reached ones not.
    assert [r["unreached"] for r in second["stages"]] == [False, False, False]
    assert [r["unreached"] for r in aborted["stages"]] == [False, True, True]
    seen = bench.ok("show", {"ref": first["id"]})["value"]
    assert seen["followed_by"] == {"id": second["id"], "alias": "t#2", "state": "running"}
    with gateway(socket_of(bench), tmp_path / "token") as web, chromium() as driver:
        driver.get(web.url)
        driver.get(f"{web.base}/run/{first['id']}")
        wait_for(driver, has_text("#followed-by", "t#2"))
        outcome = text_of(driver, ".outcome")
        assert "aborted" in outcome
        assert "→ t#2" in outcome
        link = driver.find_element("css selector", "#followed-by a")
        assert link.get_attribute("href") == f"{web.base}/run/{second['id']}"
        screenshot(driver, tmp_path, "aborted-then")
        link.click()
        wait_for(driver, has_text("h1", second["id"]))
        wait_for(driver, has_text("#log", f"working on {second['id']}"))
        assert console_errors(driver) == []
    bench.release(f"go-{second['id']}")
    assert bench.wait_run(second["id"])["state"] == "merged"
