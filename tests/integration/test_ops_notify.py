"""systemd notifications from a real daemon, read off a fake ``NOTIFY_SOCKET``.

systemd hands a ``Type=notify`` service an AF_UNIX datagram socket in
``NOTIFY_SOCKET`` and, with ``WatchdogSec``, the period in ``WATCHDOG_USEC``.
The test binds such a socket itself and checks what arrives, in order
(DESIGN "Operating it"; issue 7): ``READY=1`` with a ``STATUS=`` once the
daemon listens, ``STATUS=`` kept current, ``WATCHDOG=1`` at half the period,
``RELOADING=1`` with ``MONOTONIC_USEC`` on ``SIGHUP`` then ``READY=1`` again,
and ``STOPPING=1`` on ``SIGTERM``.  The notify variables must not reach agents.
"""

from __future__ import annotations

import itertools
import json
import signal
import socket
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import wait_until

WATCHDOG_USEC = 400_000

# An agent that records its whole environment (the script agent records only SLOOP_*).
ENV_DUMP = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"


@dataclass
class Datagram:
    at: float  # time.monotonic() when it was read
    fields: dict[str, str]

    @property
    def text(self) -> str:
        return "\n".join(f"{k}={v}" for k, v in self.fields.items())


@dataclass
class NotifyListener:
    """A bound SOCK_DGRAM socket standing in for systemd, read by a thread."""

    path: Path
    received: list[Datagram] = field(default_factory=list)
    _sock: socket.socket | None = None
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> NotifyListener:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(self.path))
        self._sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            with self._lock:
                self.received.append(Datagram(time.monotonic(), fields))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        if self._sock is not None:
            self._sock.close()

    def messages(self) -> list[Datagram]:
        with self._lock:
            return list(self.received)

    def indexes(self, key: str) -> list[int]:
        return [i for i, m in enumerate(self.messages()) if key in m.fields]

    def wait_for(self, key: str, after: int = -1, contains: str = "", timeout: float = 10.0) -> int:
        """The index of the first message past ``after`` whose ``key`` holds ``contains``."""

        def later() -> list[int]:
            messages = self.messages()
            return [
                i for i in self.indexes(key) if i > after and contains in messages[i].fields[key]
            ]

        try:
            found: list[int] = wait_until(later, timeout=timeout)
        except AssertionError:
            raise AssertionError(f"no {key} after #{after}: {self.transcript()}") from None
        return found[0]

    def transcript(self) -> str:
        return " | ".join(m.text.replace("\n", " ") for m in self.messages())


@pytest.fixture
def listener(sandbox: Path) -> Iterator[NotifyListener]:
    # The sandbox's path is short (/tmp/slXXXXXX): far below the 108-byte socket limit.
    notify = NotifyListener(sandbox / "notify.sock").start()
    try:
        yield notify
    finally:
        notify.close()


def test_ready_status_watchdog_reload_stopping_in_order(
    bench: Bench, listener: NotifyListener
) -> None:
    env_file = bench.path("agent-env.json")
    agent = [sys.executable, "-c", ENV_DUMP, str(env_file)]
    # The agent commits nothing: this test is about notifications, not merging.
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {"name": "implement", "action": "agent"},
            {"name": "merge", "action": "ff_only", "allow_empty": True},
        ]
    }
    bench.setup(sloop_toml(agent, flows=flows), {"one": ticket_text("One")})
    bench.env.update(NOTIFY_SOCKET=str(listener.path), WATCHDOG_USEC=str(WATCHDOG_USEC))
    bench.start()
    assert bench.daemon is not None
    assert bench.daemon.proc is not None

    # READY=1 comes first, with a one-line STATUS in the same datagram, and only
    # once the operator socket answers (start() returned after the socket line).
    ready = listener.wait_for("READY")
    assert ready == 0, listener.transcript()
    first = listener.messages()[0]
    assert first.fields["READY"] == "1"
    assert first.fields.get("STATUS"), first.fields
    assert "\n" not in first.fields["STATUS"]
    assert bench.dashboard()["gate"]["state"] == "open"

    # A run through an agent that records its environment: systemd's channels
    # are the daemon's, never the agent's.
    bench.post("one")
    run = bench.wait_run("one#1")
    assert run["state"] == "merged", run
    agent_env = json.loads(env_file.read_text())
    assert agent_env["SLOOP_RUN"] == "R1"
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        assert name not in agent_env, name

    # STATUS is a one-line summary kept current: a paused gate shows up, then the open one.
    summary = listener.wait_for("STATUS", after=ready, contains="runs in flight")
    assert "gate open" in listener.messages()[summary].fields["STATUS"]
    bench.ok("pause", {"reason": "notify test"})
    paused = listener.wait_for("STATUS", after=summary, contains="gate paused")
    bench.ok("resume")
    listener.wait_for("STATUS", after=paused, contains="gate open")

    # WATCHDOG=1 every WATCHDOG_USEC / 2 = 0.2 s: several pings, none far apart.
    wait_until(lambda: len(listener.indexes("WATCHDOG")) >= 8)
    pings = [m.at for m in listener.messages() if "WATCHDOG" in m.fields]
    assert all(m.fields["WATCHDOG"] == "1" for m in listener.messages() if "WATCHDOG" in m.fields)
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    # At half the period (0.2 s): the median rules out pinging at the full period
    # (too late for systemd) and a busy loop; the worst gap is bounded loosely, for
    # a loaded test host.
    half = WATCHDOG_USEC / 2e6
    assert 0.75 * half <= statistics.median(gaps) <= 1.5 * half, gaps
    assert max(gaps) < 5 * half, gaps

    # SIGHUP: RELOADING=1 with MONOTONIC_USEC (CLOCK_MONOTONIC, shared by every
    # process on the host), then READY=1 once the configuration is reloaded.
    before_hup = time.monotonic_ns() // 1000
    last = len(listener.messages()) - 1
    bench.daemon.signal(signal.SIGHUP)
    reloading = listener.wait_for("RELOADING", after=last)
    after_hup = time.monotonic_ns() // 1000
    message = listener.messages()[reloading]
    assert message.fields["RELOADING"] == "1"
    assert before_hup <= int(message.fields["MONOTONIC_USEC"]) <= after_hup
    ready_again = listener.wait_for("READY", after=reloading)
    assert listener.messages()[ready_again].fields["READY"] == "1"
    assert bench.daemon.alive()
    assert bench.dashboard()["gate"]["state"] == "open"  # still serving after the reload

    # The loop keeps pinging after the reload.
    wait_until(lambda: listener.indexes("WATCHDOG")[-1] > ready_again)

    # SIGTERM: STOPPING=1, and nothing but STOPPING is the last word.
    last = len(listener.messages()) - 1
    assert bench.stop() == 0, bench.log()
    stopping = listener.wait_for("STOPPING", after=last)
    assert listener.messages()[stopping].fields["STOPPING"] == "1"
    time.sleep(0.3)  # a stray ping after STOPPING would arrive within a period
    after_stop = listener.messages()[stopping + 1 :]
    assert not any("WATCHDOG" in m.fields or "READY" in m.fields for m in after_stop), (
        listener.transcript()
    )

    # The whole conversation, in order: READY (+STATUS) first; status lines and
    # pings while serving; the reload pair; STOPPING last.
    messages = listener.messages()
    first_status = min(i for i in listener.indexes("STATUS") if i > 0)
    first_ping = listener.indexes("WATCHDOG")[0]
    assert 0 < first_status < reloading, listener.transcript()
    assert 0 < first_ping < reloading, listener.transcript()
    assert reloading < ready_again < stopping, listener.transcript()
    assert listener.indexes("READY") == [0, ready_again], listener.transcript()
    assert listener.indexes("RELOADING") == [reloading], listener.transcript()
    assert listener.indexes("STOPPING") == [len(messages) - 1 - len(after_stop)]


def test_status_summary_is_restored_after_a_reload(bench: Bench, listener: NotifyListener) -> None:
    bench.setup(sloop_toml(["true"]), {})
    bench.env.update(NOTIFY_SOCKET=str(listener.path), WATCHDOG_USEC=str(WATCHDOG_USEC))
    bench.start()
    assert bench.daemon is not None
    summary = listener.wait_for("STATUS", after=0)
    assert "runs in flight" in listener.messages()[summary].fields["STATUS"]
    last = len(listener.messages()) - 1
    bench.daemon.signal(signal.SIGHUP)
    ready_again = listener.wait_for("READY", after=last)
    # The summary is what systemd shows again: with READY=1 itself or soon after.
    time.sleep(1.0)
    later = listener.messages()[ready_again:]
    assert any("runs in flight" in m.fields.get("STATUS", "") for m in later), listener.transcript()
