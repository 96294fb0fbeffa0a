"""Issue 34, items 5 and 6, the pure parts: the cluster's outage as the gate says it,
the stall clock of a remote child, the retries an outage does not spend, and the
driver's questions to the cluster (with a stand-in for Ray).  How a child on a node
ended is read in tests/unit/test_remote_protocol.py.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from sloopd.core.rows import Gate
from sloopd.core.state import Daemon
from sloopd.flows.agent_settings import AgentSettings
from sloopd.queue import gate
from sloopd.remote import cluster_gate, connection, messages, outage
from sloopd.remote.child import RELAY_GRACE_S, NodeClock
from sloopd.remote.cluster_gate import ClusterGate
from sloopd.runs import outcomes, retries
from sloopd.runs.runstate import RunFacts
from sloopd.runs.stop import Stop
from sloopd.store import Store

NODE = {"id": "5f1c", "host": "w1"}

# --- the cause of an outage, first (outage) -----------------------------------------

# The standard error of a driver whose cluster's head was stopped (Ray 2.60, captured):
# start-up warnings first, the cause last.
DRIVER_STDERR = [
    "2026-12-06 08:00:24,006\tWARNING worker.py:1681 -- SIGTERM handler is not set because "
    "current thread is not the main thread.",
    "[2026-12-06 08:00:24,028 W 28457 28509] network_util.cc:330: Failed to determine local "
    "IP via external connectivity to: 8.8.8.8:53, [2001:4860:4860::8888]:53, falling back to "
    "hostname resolution",
    "[2026-12-06 08:01:31,666 E 28457 28678] rpc_client.h:204: Failed to connect to GCS within "
    "60 seconds. GCS may have been killed. It's either GCS is terminated by `ray stop` or is "
    "killed unexpectedly. If it is killed unexpectedly, see the log file gcs_server.out. "
    "https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html"
    "#logging-directory-structure. The program will terminate.",
]


def test_a_driver_that_exits_is_said_by_its_cause_first_and_bounded() -> None:
    reason = outage.driver_exited(1, DRIVER_STDERR)
    assert reason.startswith("Failed to connect to GCS within 60 seconds. GCS may"), reason
    assert reason.endswith("(the Ray driver exited with code 1)"), reason
    assert "SIGTERM handler" not in reason
    assert "local IP" not in reason
    assert len(reason) <= outage.MAX_CAUSE + len(" (the Ray driver exited with code 1)")


@pytest.mark.parametrize(
    ("lines", "cause"),
    [
        (DRIVER_STDERR[:2], None),  # warnings only: no cause to name
        ([], None),
        (["Traceback (most recent call last):", '  File "x.py", line 1', "ConnectionError: no"],
         "ConnectionError: no"),
        (["2026-12-06 08:00:24,006\tERROR worker.py:1 -- the worker died", DRIVER_STDERR[0]],
         "the worker died"),
    ],
)  # fmt: skip
def test_the_cause_is_the_last_error_printed(lines: list[str], cause: str | None) -> None:
    assert outage.cause_of(lines) == cause


def test_with_no_cause_the_exit_is_said() -> None:
    assert outage.driver_exited(-9, DRIVER_STDERR[:2]) == "the Ray driver exited with code -9"


# --- the gate while the cluster is down (cluster_gate) ------------------------------


class Gates:
    """A daemon whose gate changes are recorded (the store's part is tested elsewhere)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, start: Gate | None = None) -> None:
        self.now = 1_800_000_000_000
        self.daemon = cast(Daemon, SimpleNamespace(gate=start or Gate(), executor_problem=None))
        self.changes: list[Gate] = []
        monkeypatch.setattr(cluster_gate, "now_ms", lambda: self.now)
        monkeypatch.setattr(gate, "change", self._change)

    def _change(self, daemon: Daemon, state: str, until: int | None, reason: str | None) -> Gate:
        daemon.gate = Gate(state, until, reason)
        self.changes.append(daemon.gate)
        return daemon.gate


def test_the_gate_closes_with_the_cause_stays_closed_and_reopens_when_the_cluster_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gates = Gates(monkeypatch)
    said = ClusterGate(gates.daemon, "127.0.0.1:6399")
    said("Failed to connect to GCS within 60 seconds " + "x" * 1000)
    closed = gates.daemon.gate
    assert closed.state == "cooldown"
    assert (closed.reason or "").startswith(
        "the Ray cluster at 127.0.0.1:6399 cannot be reached: Failed to connect to GCS"
    )
    assert len(closed.reason or "") <= cluster_gate.MAX_REASON
    # Said again every few seconds while the outage lasts: the deadline never comes.
    for _ in range(200):
        gates.now += 5_000
        said("Failed to connect to GCS within 60 seconds " + "x" * 1000)
        assert gates.daemon.gate.state == "cooldown"
        assert (gates.daemon.gate.until_ms or 0) > gates.now + cluster_gate.HOLD_MS // 3
    # ... and it is pushed on about once a minute, not at every saying.
    assert len(gates.changes) <= 1 + 200 * 5_000 // (cluster_gate.HOLD_MS // 2) + 1
    assert gates.daemon.executor_problem
    said(None)
    assert gates.daemon.gate == Gate()
    assert gates.daemon.executor_problem == ""


@pytest.mark.parametrize(
    "other",
    [Gate("paused", None, "release freeze"), Gate("cooldown", 2_000_000_000_000, "usage limit")],
)
def test_a_gate_closed_by_someone_else_is_left_as_it_is(
    monkeypatch: pytest.MonkeyPatch, other: Gate
) -> None:
    gates = Gates(monkeypatch, other)
    said = ClusterGate(gates.daemon, "127.0.0.1:6399")
    said("down")
    said(None)
    assert gates.daemon.gate == other
    assert gates.changes == []


# --- the stall clock of a child on a node (child.NodeClock) -------------------------


def test_relay_delay_is_not_silence_but_a_relay_gone_quiet_is() -> None:
    clock = NodeClock(now=100.0)
    clock.report(0.2, now=101.0)  # the node: it printed 0.2 s ago
    # No report for 20 s (a loaded host's relay): still 0.2 s of silence, not 20.
    assert 121.0 - clock.last_output(121.0) == pytest.approx(0.2)
    # Past the grace the relay's silence counts: a stall is never hidden for good.
    later = 101.0 + RELAY_GRACE_S + 7.0
    assert later - clock.last_output(later) == pytest.approx(7.2)
    # The node says how long the child has been silent: that is the clock.
    clock.report(42.0, now=200.0)
    assert 200.5 - clock.last_output(200.5) == pytest.approx(42.0)


def test_the_daemons_own_pause_is_credited_until_the_next_report() -> None:
    clock = NodeClock(now=0.0)
    clock.report(10.0, now=50.0)
    now = 51.0
    clock.set_last_output(clock.last_output(now) + 4.0, now)  # ActiveRun.credit_pause(4)
    assert now - clock.last_output(now) == pytest.approx(6.0)
    clock.report(3.0, now=52.0)
    assert 52.0 - clock.last_output(52.0) == pytest.approx(3.0)


# --- the retries an outage does not spend (outcomes, retries) -----------------------


class Outcomes:
    """``run_outcomes_for_ticket`` rows, newest first."""

    def __init__(self, rows: list[tuple[str, str, dict[str, Any] | None]]) -> None:
        self.rows = rows

    def all(self, name: str, args: tuple[Any, ...]) -> list[tuple[str, str, str | None]]:
        assert name == "run_outcomes_for_ticket"
        return [(r, s, None if d is None else orjson.dumps(d).decode()) for r, s, d in self.rows]


def test_a_stage_lost_with_the_cluster_says_so_and_spends_no_retry() -> None:
    down = outcomes.lost("ActorDiedError", NODE, cluster_down=True).diagnosis
    node = outcomes.lost("ActorDiedError", NODE).diagnosis
    assert down is not None
    assert node is not None
    assert down["classification"] == node["classification"] == "node_lost"
    assert down["cluster_down"] is True
    assert "cluster_down" not in node  # a lost node's diagnosis is as it was
    store = cast(Store, Outcomes([("R4", "failed", down), ("R3", "failed", node),
                                  ("R2", "failed", down), ("R1", "failed", node)]))  # fmt: skip
    assert retries.retries_used(store, "T1", "R5") == 2  # the two lost nodes only
    facts = cast(RunFacts, SimpleNamespace(ticket="T1", run_id="R5"))
    settings = AgentSettings(transient_retries=2)
    # Both retries spent on lost nodes: one more lost node is not queued again...
    spent = retries.after_transient(store, settings, facts, "implement", 1, node)
    assert spent.requeue_at_ms is None, spent
    assert "transient retries are spent" in (spent.reason or ""), spent
    # ... but a stage lost with the cluster is, for when it is back.
    again: Stop = retries.after_transient(store, settings, facts, "implement", 1, down)
    assert again.requeue_at_ms is not None, again
    assert "transient retry" not in (again.reason or "").replace("no transient retry", ""), again
    assert "when the Ray cluster is back" in (again.reason or ""), again


# --- the driver's questions to the cluster (connection.ClusterLink) -----------------


def test_a_question_the_cluster_does_not_answer_says_down_then_up_when_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "PROBE_SECONDS", 0.2)
    monkeypatch.setattr(connection, "CONNECT_SECONDS", 0.2)
    monkeypatch.setattr(connection, "HEALTH_SECONDS", 0.05)
    monkeypatch.setattr(connection, "RECONNECT_SECONDS", 0.05)
    answering = threading.Event()
    answering.set()
    events: list[messages.Event] = []

    def connect() -> int:
        answering.wait()  # as ray.nodes() blocks while the GCS is gone
        return 3

    async def scenario() -> tuple[str | None, str | None]:
        link = connection.ClusterLink("127.0.0.1:6399", "sloop", events.append)
        monkeypatch.setattr(link, "_connect", connect)
        keeper = asyncio.get_running_loop().create_task(link.keep())
        try:
            await asyncio.wait_for(link.up.wait(), 10)
            answering.clear()  # the cluster stops answering
            lost = await asyncio.wait_for(link.verdict(), 10)  # a stage was lost meanwhile
            assert not link.connected
            answering.set()
            back = await asyncio.wait_for(link.verdict(), 10)
            await asyncio.wait_for(link.up.wait(), 10)
            return lost, back
        finally:
            keeper.cancel()
            answering.set()

    lost, back = asyncio.run(scenario())
    assert lost is not None
    assert "did not answer" in lost, lost
    assert back is None
    kinds = [type(event).__name__.lower() for event in events]
    assert kinds[0] == "up"
    assert "down" in kinds
    assert kinds[-1] == "up"
    # The down came before the verdict: the daemon hears it before the stage's loss.
    assert kinds.index("down") < len(kinds) - 1
