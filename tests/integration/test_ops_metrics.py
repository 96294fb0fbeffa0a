"""The Prometheus endpoint of a real daemon (``sloopd serve --metrics HOST:PORT``).

After a walk (one ticket merged, one failed) a scrape must carry the counters
of issue 7 under the names the deploy/ rules and dashboard use
(``tests.deploy.test_deploy.METRICS``), never a run or ticket id as a label
value, and pass ``promtool check metrics``.
"""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.test_deploy import METRICS, need
from tests.support.agents import Bench, sloop_toml, start_with_args, ticket_text
from tests.support.daemon import free_loopback_port, wait_until

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
ID_VALUE = re.compile(r"^(?:R|T|TR)\d+$")


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: str


@dataclass(frozen=True)
class Scrape:
    text: str
    # (sample name, sorted label items) -> value
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    families: dict[str, str]  # family name as in "# TYPE" -> type

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def matching(self, name: str, **labels: str) -> list[float]:
        """Values of ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return [v for (n, items), v in self.samples.items() if n == name and wanted <= set(items)]


def request(port: int, method: str, path: str) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return Reply(
            response.status,
            response.getheader("Content-Type") or "",
            response.read().decode(),
        )
    finally:
        conn.close()


def scrape(port: int) -> Scrape:
    reply = request(port, "GET", "/metrics")
    assert reply.status == 200, reply
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(reply.body):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    families = dict(
        line.split()[2:4] for line in reply.body.splitlines() if line.startswith("# TYPE ")
    )
    return Scrape(reply.body, samples, families)


def walk_one_merged_one_failed(bench: Bench, port: int) -> None:
    ok_agent = bench.argv("--say", "working on {run}", "--write", "{ticket}.txt=done by {run}")
    failing = [{"name": "implement", "action": "agent", "command": bench.argv("--exit", "1")}]
    bench.setup(
        sloop_toml(ok_agent, flows={"broken": failing}),
        {"good": ticket_text("Good"), "bad": ticket_text("Bad", flow="broken")},
    )
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    bench.post("good")
    bench.post("bad")
    assert bench.wait_run("good#1")["state"] == "merged"
    assert bench.wait_run("bad#1")["state"] == "failed"


def test_scrape_after_a_walk(bench: Bench) -> None:
    port = free_loopback_port()
    walk_one_merged_one_failed(bench, port)

    # Log records are counted when the sink flushes its batch; wait for it.
    current = wait_until(
        lambda: (s := scrape(port)).value("sloop_log_records_total") and s, timeout=10
    )
    reply = request(port, "GET", "/metrics")
    assert reply.status == 200
    # The exact version parameter is test_content_type_is_text_format_0_0_4's business.
    assert reply.content_type.startswith("text/plain; version="), reply.content_type

    assert current.value("sloop_runs_finished_total", state="merged") == 1
    assert current.value("sloop_runs_finished_total", state="failed") == 1
    assert current.value("sloop_tickets", state="merged") == 1
    assert current.value("sloop_tickets", state="failed") == 1
    for state in ("ready", "held", "running", "needs_review"):
        assert current.value("sloop_tickets", state=state) == 0, state
    assert (current.value("sloop_requests_total", verb="post", code="ok") or 0) >= 2
    assert (current.value("sloop_request_duration_seconds_count", verb="post") or 0) >= 2
    stages = "sloop_stage_duration_seconds_count"
    assert current.value(stages, flow="default", stage="implement", state="passed") == 1
    assert current.value(stages, flow="default", stage="sync", state="passed") == 1
    assert current.value(stages, flow="default", stage="merge", state="passed") == 1
    assert current.value(stages, flow="broken", stage="implement", state="failed") == 1
    assert current.matching(stages, state="failed") == [1]
    assert (current.value("sloop_log_records_total") or 0) > 0
    assert (current.value("sloop_events_total") or 0) > 0
    assert current.value("sloop_queue_wait_seconds_count") == 2
    assert current.value("sloop_build_info", version="0.8.0") == 1
    assert current.value("sloop_gate_state", state="open") == 1
    assert current.value("sloop_gate_state", state="cooldown") == 0
    assert current.value("sloop_gate_state", state="paused") == 0
    assert current.value("sloop_gate_cooldown_until_seconds") == 0
    assert current.value("sloop_runs_in_flight") == 0
    assert current.value("sloop_runs_stalled") == 0
    assert current.value("sloop_triggers_queued") == 0
    assert current.value("sloop_triggers_due") == 0
    assert (current.value("sloop_store_size_bytes") or 0) > 0
    # Nobody read a log yet: nothing held; a page read from the store is held after.
    assert current.value("sloop_log_cache_bytes") == 0
    bench.ok("logs", {"run": "R1"})
    assert (scrape(port).value("sloop_log_cache_bytes") or 0) > 0

    # An error code is a label value too.
    assert bench.client.error("abort", {"run": "R99"})["code"] == "not_found"
    after = scrape(port)
    assert after.value("sloop_requests_total", verb="abort", code="not_found") == 1

    # The gate is read at scrape time.
    bench.ok("pause")
    paused = scrape(port)
    assert paused.value("sloop_gate_state", state="paused") == 1
    assert paused.value("sloop_gate_state", state="open") == 0
    bench.ok("resume")

    # No label carries a run, ticket or trigger id: they would grow without bound.
    for (name, labels), _ in after.samples.items():
        for key, value in labels:
            assert not ID_VALUE.match(value), (name, key, value)

    # Every name is one the rules and dashboard may use (deploy/ is checked against METRICS).
    for family, kind in after.families.items():
        if kind == "histogram":
            assert all(family + s in METRICS for s in HISTOGRAM_SUFFIXES), family
        else:
            assert family in METRICS, (family, kind)
    for name, _labels in after.samples:
        assert name in METRICS, name
    assert all(name.startswith("sloop_") for name, _ in after.samples)

    # GET (or HEAD) /metrics only.
    nope = request(port, "GET", "/nope")
    assert nope.status == 404, nope
    assert nope.content_type.startswith("text/plain"), nope
    assert request(port, "POST", "/metrics").status == 405
    assert request(port, "DELETE", "/metrics").status == 405
    head = request(port, "HEAD", "/metrics")
    assert head.status == 200
    assert head.body == ""
    assert request(port, "GET", "/metrics?x=1").status == 200


def test_scrape_passes_promtool(bench: Bench) -> None:
    promtool = need("promtool", "prometheus")
    port = free_loopback_port()
    walk_one_merged_one_failed(bench, port)
    body = request(port, "GET", "/metrics").body
    done = subprocess.run(
        [promtool, "check", "metrics"],
        input=body,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr, body)


def test_content_type_is_text_format_0_0_4(bench: Bench) -> None:
    port = free_loopback_port()
    bench.setup(sloop_toml([sys.executable, "-c", "pass"]), {})
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    reply = request(port, "GET", "/metrics")
    assert reply.status == 200
    assert reply.content_type.startswith("text/plain; version=0.0.4"), reply.content_type
