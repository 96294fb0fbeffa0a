"""7. Memory after a flood: the daemon's RSS before, during and after an agent prints 100 MB.

A real daemon (``python -m sloopd serve``) on a repository whose agent writes
``FLOOD_MB`` megabytes to stdout as fast as the pipe takes them, then exits 0 (the
run then fails at its merge, having committed nothing; that does not matter here).
Three floods, each on a fresh daemon: 200 KB lines (split into 64 KiB records) with
the default output limits (64 MiB stored, the rest counted), the same with limits
raised so all of it is stored, and 100-byte lines.  The daemon's resident set
(``VmRSS`` in ``/proc/<pid>/status``) is sampled every 50 ms: the baseline is the
figure once the daemon is up and idle, the peak the largest sample while the agent
floods, and the figure after is read once the run has settled and the daemon has
been idle for ``SETTLE_S`` seconds.  The floor is the baseline: the figure after
should come back within ``GOAL_ABOVE_MIB`` of it.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from benchmarks.common import (
    Client,
    Row,
    Table,
    make_repo,
    sandbox,
    start_daemon,
    stop_daemon,
    verdict,
)

FLOOD_MB = 100
GOAL_ABOVE_MIB = 60.0
SETTLE_S = 3.0

FLOOD_SOURCE = """\
import sys
total = int(sys.argv[1]) * 1_000_000
line = b"flood: compiling src/module.py ... " + b"x" * int(sys.argv[2]) + b"\\n"
block = line * max(1, 100_000 // len(line))
write = sys.stdout.buffer.write
written = 0
while written < total:
    write(block)
    written += len(block)
sys.stdout.buffer.flush()
"""


def memory_mib(pid: int) -> dict[str, float]:
    """The memory lines of /proc/<pid>/status in MiB: VmRSS, VmHWM (the peak resident
    set), RssAnon, RssFile, RssShmem."""
    found: dict[str, float] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                found[key] = int(value.split()[0]) / 1024
    if "VmRSS" not in found:
        raise RuntimeError(f"no VmRSS for {pid}")
    return found


def rss_mib(pid: int) -> float:
    return memory_mib(pid)["VmRSS"]


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0.0
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except (OSError, RuntimeError):
                return
            time.sleep(0.05)


def setup(root: Path, megabytes: int, line_bytes: int, limits: str) -> Path:
    flood = root / "flood.py"
    flood.write_text(FLOOD_SOURCE, encoding="utf-8")
    agent = [sys.executable, str(flood), str(megabytes), str(line_bytes)]
    files = {
        "sloop.toml": "[agent]\ncommand = " + orjson.dumps(agent).decode() + "\n" + limits,
        "tickets/flood.md": "# Flood\n\nPrint a lot.\n",
    }
    return make_repo(root, files)


def wait_settled(client: Client, ref: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        reply: dict[str, Any] = client.call("show", {"ref": ref})
        if reply.get("kind") == "run" and reply["value"]["terminal"]:
            return reply["value"]  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ref} did not settle: {orjson.dumps(reply)[:2000]!r}")
        time.sleep(0.1)


@dataclass(frozen=True, slots=True)
class Flood:
    name: str
    line_bytes: int
    limits: str = ""


@dataclass(frozen=True, slots=True)
class Measured:
    baseline: float
    peak: float
    after: float
    seconds: float
    stored: int
    dropped_note: str


FLOODS = (
    Flood("200 KB lines, default limits", 200_000),
    Flood(
        "200 KB lines, all stored", 200_000, 'max_log_bytes = "1GiB"\nmax_log_lines = 10000000\n'
    ),
    Flood("100-byte lines, default limits", 100 - 36),
)


def measure(megabytes: int, flood: Flood) -> Measured:
    with sandbox() as box:
        root = box.tmpdir("mem")
        repo = setup(root, megabytes, flood.line_bytes, flood.limits)
        daemon = start_daemon(box, repo, root)
        try:
            client = Client(daemon.socket)
            client.call("show")
            time.sleep(1.0)
            baseline = rss_mib(daemon.pid)
            sampler = Sampler(daemon.pid)
            sampler.start()
            began = time.monotonic()
            client.call("post", {"path": "tickets/flood.md"})
            run = wait_settled(client, "flood#1", timeout=600)
            seconds = time.monotonic() - began
            sampler.stop_event.set()
            sampler.join()
            time.sleep(SETTLE_S)
            after = rss_mib(daemon.pid)
            tail = client.call("logs", {"run": run["id"], "stage": "implement", "tail": 2})
            client.close()
        finally:
            stop_daemon(box, daemon)
    records = tail["records"]
    stored = int(tail["elided"]) + len(records)
    note = next((r["text"] for r in records if r["text"].startswith("output limit")), "")
    return Measured(baseline, max(sampler.peak, after), after, seconds, stored, note)


def run(quick: bool) -> Table:
    megabytes = 20 if quick else FLOOD_MB
    table = Table(f"7. memory: daemon RSS before, during and after an agent prints {megabytes} MB")
    for flood in FLOODS:
        m = measure(megabytes, flood)
        above = m.after - m.baseline
        table.add(
            Row(
                f"RSS after: {flood.name}",
                f"{m.after:.0f} MiB",
                "RSS before (idle)",
                f"{m.baseline:.0f} MiB",
                f"{m.after / m.baseline:.2f}x",
                f"<= +{GOAL_ABOVE_MIB:.0f} MiB",
                verdict(above <= GOAL_ABOVE_MIB),
            )
        )
        table.add(
            Row(
                f"  RSS peak: {flood.name}",
                f"{m.peak:.0f} MiB",
                "RSS before (idle)",
                f"{m.baseline:.0f} MiB",
                f"{m.peak / m.baseline:.2f}x",
            )
        )
        table.notes.append(
            f"{flood.name}: settled after {m.seconds:.1f} s; {m.stored} records of the implement "
            f"stage stored; {m.dropped_note[:160] or 'nothing dropped'}"
        )
    table.notes.append(f"RSS read {SETTLE_S:.0f} s after each run settled; one fresh daemon each")
    return table
