"""The real Gemini CLI's faults through the gemini preset, against its stand-in (issue 34).

The pinned CLI runs as ``[agent] preset = "gemini"`` runs it, in the sandbox, against
``tests.support.standins.gemini``:

* the API's stream breaks off (text, then no ``finishReason``): the CLI prints an error
  event "Model stream ended without a finish reason." and a ``result`` of status
  ``"error"``, and exits 0.  The stage fails ``overloaded`` in those words and the
  ticket is queued again; the retry, on a stand-in answering again, merges (0.8.0: the
  stage passed, and the run failed "nothing to merge", unclassified, not retried);
* the API answers 429 "Your prepayment credits are depleted …": the CLI exits 173 with
  a Node stack dump on stderr; the run is ``usage_limit`` with the vendor's sentence as
  its evidence, and the gate closes (0.8.0: ``rate_limited``, evidence ``status: 429``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.integration.test_agent_presets import RUN_TIMEOUT_S, on_path, preset_toml
from tests.support.agents import Bench, ticket_text
from tests.support.standins import gemini

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture
def api() -> Iterator[gemini.GeminiStandIn]:
    standin = gemini.GeminiStandIn().start()
    try:
        yield standin
    finally:
        standin.stop()


def start(bench: Bench, api: gemini.GeminiStandIn, agent: str = "") -> None:
    on_path(bench, ["gemini"])
    bench.env.update(GEMINI_API_KEY="standin-key", GOOGLE_GEMINI_BASE_URL=api.url)
    config = preset_toml(bench, "gemini", ["gemini"]) + agent
    bench.setup(config, {"hello": ticket_text("Add hello")})
    bench.start()


def log_texts(bench: Bench, run_id: str) -> list[str]:
    return [r["text"] for r in bench.ok("logs", {"run": run_id})["records"]]


def test_a_stream_that_breaks_off_fails_the_stage_and_is_queued_again(
    bench: Bench, api: gemini.GeminiStandIn
) -> None:
    api.broken_streams = 1
    start(
        bench,
        api,
        'transient_retries = 1\ntransient_backoff = "1s"\ntransient_backoff_max = "1s"\n',
    )
    bench.post("hello")

    run = bench.wait_run("hello#1", timeout=RUN_TIMEOUT_S)
    texts = log_texts(bench, run["id"])
    assert any("Model stream ended without a finish reason." in t for t in texts), texts
    assert run["agent_exit_code"] == 0, (run, texts[-10:])
    assert run["state"] == "failed", (run, texts[-10:])
    assert run["classification"] == "overloaded", run
    assert run["diagnosis"]["vendor"] == "gemini", run
    assert run["diagnosis"]["evidence"] == "Model stream ended without a finish reason.", run
    implement = run["stages"][0]
    assert implement["reason"].startswith(
        'exited with code 0, but the CLI\'s stream ends in a result of status "error"'
    ), implement
    assert "nothing to merge" not in run["reason"], run
    assert "queued again in 1s (transient retry 1 of 1)" in run["reason"], run

    again = bench.wait_run("hello#2", timeout=RUN_TIMEOUT_S)
    assert again["state"] == "merged", (again, log_texts(bench, again["id"])[-10:])
    assert (bench.repo / "hello.txt").read_text() == "hello\n"


def test_a_spent_prepaid_balance_is_a_usage_limit_in_the_vendors_sentence(
    bench: Bench, api: gemini.GeminiStandIn
) -> None:
    api.mode = "prepaid"
    start(bench, api)
    bench.post("hello")

    run = bench.wait_run("hello#1", timeout=RUN_TIMEOUT_S)
    texts = log_texts(bench, run["id"])
    assert any(t.strip() == "status: 429" for t in texts), texts[-30:]  # the stack dump
    assert run["state"] == "failed", (run, texts[-10:])
    assert run["agent_exit_code"] == 173, run
    assert run["classification"] == "usage_limit", run
    diagnosis = run["diagnosis"]
    assert diagnosis["vendor"] == "gemini", diagnosis
    assert diagnosis["evidence"].startswith(f"[API Error: {gemini.PREPAID_DEPLETED}]"), diagnosis
    assert "status: 429" not in run["reason"], run
    gate = bench.dashboard()["gate"]
    assert gate["state"] == "cooldown", gate
