"""Bounded work per agent (issue 13), through the real daemon.

- A flooding agent: past ``agent.max_log_lines`` / ``max_log_bytes`` its output is
  counted, not stored, in one ``system`` record, and its stage finishes normally.
- A ``logs`` tail is one page at most: a longer tail answers its first page with
  ``complete: false`` and reads on with ``after``.
- A reset time far ahead ("resets in 31 days") closes the gate for
  ``agent.max_cooldown`` only, and the gate's reason says so.
- Classifying a huge, hostile output does not stall a concurrent ``show``.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest

from tests.integration.test_logs_events import page_all
from tests.integration.test_vendor_limits import MERGE, SYNC, VendorBench
from tests.support.agents import Bench, printer_argv, sloop_toml, ticket_text
from tests.support.scaling import main_thread_cpu_seconds

STORED = 250
PRINTED = 2000
ERRORS = 10


@pytest.fixture
def vendor(bench: Bench) -> VendorBench:
    return VendorBench(bench)


def read_on(bench: Bench, args: dict[str, Any], after: str) -> list[dict[str, Any]]:
    """Every record after ``after``, page by page."""
    records: list[dict[str, Any]] = []
    while True:
        page = bench.ok("logs", {**args, "after": after})
        records += page["records"]
        after = page["next_cursor"]
        if page["complete"]:
            return records


def _line(n: int) -> str:
    return f"line {n} " + "y" * 80


def test_a_flood_is_counted_in_one_system_record_and_the_stage_finishes(bench: Bench) -> None:
    steps: list[dict[str, Any]] = [
        {
            "do": "lines",
            "stream": "stdout",
            "text": "line {n} " + "y" * 80,
            "first": 1,
            "last": PRINTED,
        },
        {"do": "lines", "stream": "stderr", "text": "err {n}", "first": 1, "last": ERRORS},
        {"do": "touch", "path": "out.txt"},
    ]
    agent = printer_argv(bench, steps)
    implement = {"name": "implement", "action": "agent", "command": agent, "commit": "auto"}
    config = sloop_toml(agent, flows={"default": [implement, SYNC, MERGE]}).replace(
        "[agent]\n", f'[agent]\nmax_log_lines = {STORED}\nmax_log_bytes = "1MiB"\n'
    )
    bench.setup(config, {"flood": ticket_text("Flood")})
    bench.start()
    bench.post("flood")
    run = bench.wait_run("flood#1")
    assert run["state"] == "merged", run
    assert (run["stages"][0]["stage"], run["stages"][0]["state"]) == ("implement", "passed")

    records = page_all(bench, {"run": run["id"], "stage": "implement#1"})
    output = [r for r in records if r["stream"] in ("stdout", "stderr")]
    assert [r["text"] for r in output] == [_line(n) for n in range(1, STORED + 1)]
    limits = [r for r in records if r["text"].startswith("output limit reached")]
    assert len(limits) == 1, [r["text"] for r in records if r["stream"] == "system"]
    dropped_lines = PRINTED - STORED + ERRORS
    dropped_bytes = sum(len(_line(n)) for n in range(STORED + 1, PRINTED + 1)) + sum(
        len(f"err {n}") for n in range(1, ERRORS + 1)
    )
    text = limits[0]["text"]
    assert limits[0]["stream"] == "system", limits
    assert limits[0]["attempt"] == 1, limits
    assert f"{dropped_lines} lines" in text, text
    assert f"{dropped_bytes} bytes" in text, text
    assert "agent.max_log_lines = 250" in text, text
    assert "printed from 20" in text, text
    # Written when the child ended: after every stored line, before the stage's end.
    assert records.index(limits[0]) > records.index(output[-1])

    # A tail longer than a page answers one page and says how to read on.
    everything = page_all(bench, {"run": run["id"], "stage": "implement"})
    total = len(everything)
    assert total > 200
    for tail, elided in ((total + 1000, 0), (150, total - 150)):
        page = bench.ok("logs", {"run": run["id"], "stage": "implement", "tail": tail})
        assert len(page["records"]) == 100, (tail, len(page["records"]))
        assert page["elided"] == elided, page
        assert page["complete"] is False, page
        assert page["next_cursor"] == page["records"][-1]["cursor"]
        rest = read_on(bench, {"run": run["id"], "stage": "implement"}, page["next_cursor"])
        assert page["records"] + rest == everything[elided:], tail
    # A tail within a page is unchanged: complete, ending at the feed's end.
    page = bench.ok("logs", {"run": run["id"], "tail": 100})
    assert len(page["records"]) == 100
    assert page["complete"] is True


def test_a_far_reset_time_is_capped_at_max_cooldown(bench: Bench, vendor: VendorBench) -> None:
    flow = [vendor.stage(), SYNC, MERGE]
    bench.setup(
        sloop_toml(vendor.argv, flows={"default": flow}).replace(
            "[agent]\n", '[agent]\nmax_cooldown = "4s"\n'
        ),
        {"one": ticket_text("One")},
    )
    bench.start()
    far = int(time.time()) + 31 * 86_400  # "resets in 31 days", as an epoch
    vendor.say("T1", f"Claude AI usage limit reached|{far}\n")
    before = int(time.time() * 1000)
    bench.post("one")
    run = bench.wait_run("one#1")
    assert run["classification"] == "usage_limit", run
    assert run["diagnosis"]["reset_at_ms"] == far * 1000  # what the agent said, kept
    gate = bench.dashboard()["gate"]
    assert gate["state"] == "cooldown", gate
    assert before + 4000 <= gate["until_ms"] <= run["finished_at_ms"] + 4000, (gate, run)
    said = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(far))
    assert gate["reason"] == (
        f"usage limit reported by the agent of {run['id']} "
        f"(the agent said {said}; capped at max_cooldown 4s)"
    ), gate
    ticket = bench.ticket("one")
    assert ticket["trigger"]["due_at_ms"] == gate["until_ms"], ticket
    # The gate reopens after the cap, not in a month: the next attempt merges.
    vendor.succeed("T1")
    second = bench.wait_run("one#2", timeout=30)
    assert second["state"] == "merged", second
    assert second["claimed_at_ms"] >= gate["until_ms"]


HOSTILE_AGENT = r"""
import sys
piece = (b"status error model is reset code connection " * 2000)[: 64 * 1024 - 1] + b"\n"
block = piece * 16
for _ in range(int(sys.argv[1]) // 16):
    sys.stdout.buffer.write(block)
sys.stdout.buffer.flush()
sys.exit(1)
"""


def test_classifying_a_huge_output_does_not_stall_show(bench: Bench) -> None:
    script = bench.root / "agents" / "hostile.py"
    script.write_text(HOSTILE_AGENT, encoding="utf-8")
    agent = [sys.executable, str(script), "2400"]  # 2400 lines of 64 KiB: 150 MiB
    config = sloop_toml(agent).replace("[agent]\n", '[agent]\nmax_log_bytes = "1MiB"\n')
    bench.setup(config, {"hostile": ticket_text("Hostile")})
    bench.start()
    assert bench.daemon is not None
    assert bench.daemon.proc is not None
    probe, daemon_pid = bench.daemon.client(), bench.daemon.proc.pid
    # The daemon's own CPU time across each show: the work that held the answer, which
    # a busy host does not inflate (wall time it does: tests/support/scaling.py).
    work: list[float] = []
    walls: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            started, working = time.monotonic(), main_thread_cpu_seconds(daemon_pid)
            probe.call("show", {})
            work.append(main_thread_cpu_seconds(daemon_pid) - working)
            walls.append(time.monotonic() - started)
            time.sleep(0.02)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        bench.post("hostile")
        run = bench.wait_run("hostile#1")
    finally:
        done.set()
        poller.join(10)
    assert run["state"] == "failed", run
    assert run["classification"] == "unknown", run
    assert work, "the probe got no reply"
    assert max(work) < 1.0, f"show waited behind {max(work):.2f} s of the daemon's work"
    # Only a sanity bound on wall time (a loop held by a blocking wait does no work).
    assert max(walls) < 10.0, f"show took {max(walls):.2f} s"
