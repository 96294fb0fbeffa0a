"""Prometheus metrics, served from the event loop on ``--metrics HOST:PORT``.

Counters and histograms are updated where things happen; gauges that mirror
the store (tickets by state, queue depth, gate) are read at scrape time by a
collector, so they can never drift from the truth.  No run or ticket ids are
ever labels.  Serving from the loop (not prometheus-client's thread) keeps
every store read on the one thread that owns the connections.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

# generate_latest writes the 0.0.4 text format; say so whatever the library's default.
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from sloopd.store import Store, TriggerRow
from sloopd.util.clock import now_ms
from sloopd.wire import api

log = logging.getLogger(__name__)

# The *_created series double every counter's cardinality for no operator value.
disable_created_metrics()  # type: ignore[no-untyped-call]

STAGE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30)


class Observed(Protocol):
    """What the scrape-time gauges read; the daemon's shared state provides it."""

    @property
    def store(self) -> Store | None: ...

    def gate_state(self) -> tuple[str, int | None]: ...

    def stalled_runs(self) -> int: ...

    def held_requests(self) -> int: ...

    def log_cache_bytes(self) -> int: ...


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs_finished = Counter(
            "sloop_runs_finished", "Runs settled, by final state.", ["state"], registry=r
        )
        self.stage_duration = Histogram(
            "sloop_stage_duration_seconds",
            "Duration of stage executions.",
            ["flow", "stage", "state"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "sloop_queue_wait_seconds",
            "Time from a trigger being due to its claim.",
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        # The merge queue (sloopd.landing): its depth, how long a run waits in it from
        # joining to landing, gate executions per landed run, rebuilds by cause.
        self.merge_queue_depth = Gauge(
            "sloop_merge_queue_depth", "Runs in the merge queue.", registry=r
        )
        self.merge_queue_wait = Histogram(
            "sloop_merge_queue_wait_seconds",
            "Time from joining the merge queue to landing.",
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.merge_queue_gate_executions = Histogram(
            "sloop_merge_queue_gate_executions",
            "Gate stage executions per run landed through the merge queue.",
            buckets=(0, 1, 2, 3, 4, 6, 8, 12, 16, 32),
            registry=r,
        )
        self.merge_queue_rebuilds = Counter(
            "sloop_merge_queue_rebuilds",
            "Merge-queue candidates rebuilt, by cause (a run ahead left, main moved).",
            ["cause"],
            registry=r,
        )
        for cause in ("left_failed", "left_conflict", "left_aborted", "left_other", "main_moved"):
            self.merge_queue_rebuilds.labels(cause)
        # Usage the agents' JSON event streams reported (sloopd.vendor.usage); the
        # vendor label is the stream's name, "custom" for a python: parser.
        self.agent_tokens = Counter(
            "sloop_agent_tokens",
            "Tokens agents reported, by vendor stream and kind (input, output, cached).",
            ["vendor", "kind"],
            registry=r,
        )
        self.agent_cost = Counter(
            "sloop_agent_cost_usd",
            "Cost in US dollars agents reported, by vendor stream.",
            ["vendor"],
            registry=r,
        )
        # Requests are counted in plain Python on the hot path (a prometheus child's
        # inc and observe take a lock each: as much as a whole dashboard reply) and
        # handed to the registry at scrape time, as sloop_requests_total and
        # sloop_request_duration_seconds.
        self._requests = _RequestCounts()
        r.register(self._requests)
        # Told of every answered request (wire.dispatch's observer): the counters' own
        # method, one call on the hot path.
        self.observe_request: Callable[[str, str, float], None] = self._requests.observe
        self.log_records = Counter("sloop_log_records", "Log records appended.", registry=r)
        self.events = Counter("sloop_events", "Events appended.", registry=r)
        # [[notify]] webhooks (sloopd.ops.webhooks): how each delivery ended, and every
        # failed attempt (retried or not).  No target URL or host is a label.
        self.notify_deliveries = Counter(
            "sloop_notify_deliveries",
            "Webhook deliveries ended, by outcome (delivered, failed, dropped).",
            ["outcome"],
            registry=r,
        )
        for outcome in ("delivered", "failed", "dropped"):
            self.notify_deliveries.labels(outcome)
        self.notify_attempt_failures = Counter(
            "sloop_notify_attempt_failures",
            "Webhook attempts that failed (an error, a timeout or a non-2xx answer).",
            registry=r,
        )
        # Stages on Ray (sloopd.remote): where children run, what crosses to the nodes.
        # The node label is its host name ("" on the daemon's host): as many as nodes.
        self.children_running = Gauge(
            "sloop_stage_children_running",
            "Stage children (agents, commands, panel seats) running, by backend and node.",
            ["backend", "node"],
            registry=r,
        )
        self.children_running.labels("local", "")
        self.shipped_bytes = Counter(
            "sloop_ray_shipped_bytes",
            "Bytes of git bundles shipped to Ray nodes (to_node) and back (from_node).",
            ["direction"],
            registry=r,
        )
        for direction in ("to_node", "from_node"):
            self.shipped_bytes.labels(direction)
        self.relay_latency = Histogram(
            "sloop_ray_relay_latency_seconds",
            "A relayed worker request's round trip, as the node saw it: from the agent's "
            "request to the daemon's answer written back to it.",
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        build = Gauge("sloop_build_info", "Build information.", ["version"], registry=r)
        build.labels(api.SOFTWARE_VERSION).set(1)

    # sloopd.remote.child.RemoteMetrics
    def shipped(self, direction: str, size: int) -> None:
        self.shipped_bytes.labels(direction).inc(size)

    def relayed(self, seconds: float) -> None:
        self.relay_latency.observe(seconds)

    def watch(self, daemon: Observed) -> None:
        self.registry.register(_StoreCollector(daemon))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _RequestCounts(Collector):
    """Requests by verb and code, and their durations by verb, exposed at scrape time."""

    def __init__(self) -> None:
        self.answered: dict[tuple[str, str], int] = {}
        # verb -> [count in each bucket (not cumulative), the last one +Inf], and the sum.
        self.buckets: dict[str, list[int]] = {}
        self.seconds: dict[str, float] = {}

    def observe(self, verb: str, code: str, seconds: float) -> None:
        key = (verb, code)
        self.answered[key] = self.answered.get(key, 0) + 1
        counts = self.buckets.get(verb)
        if counts is None:
            counts = self.buckets[verb] = [0] * (len(REQUEST_BUCKETS) + 1)
            self.seconds[verb] = 0.0
        # Prometheus buckets count values <= their bound: the first bound not below it.
        counts[bisect.bisect_left(REQUEST_BUCKETS, seconds)] += 1
        self.seconds[verb] += seconds

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "sloop_requests",
            "Requests answered, by verb and code ('ok' or the error code).",
            labels=["verb", "code"],
        )
        for (verb, code), count in sorted(self.answered.items()):
            requests.add_metric([verb, code], count)
        yield requests
        durations = HistogramMetricFamily(
            "sloop_request_duration_seconds", "Time to answer a request, by verb.", labels=["verb"]
        )
        for verb, counts in sorted(self.buckets.items()):
            cumulative = list(itertools.accumulate(counts))
            bounds = [*map(floatToGoString, REQUEST_BUCKETS), "+Inf"]
            durations.add_metric(
                [verb], list(zip(bounds, cumulative, strict=True)), self.seconds[verb]
            )
        yield durations


class _StoreCollector(Collector):
    """Gauges read from the store at scrape time."""

    def __init__(self, daemon: Observed) -> None:
        self.daemon = daemon

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        daemon = self.daemon
        store = daemon.store
        if store is None:
            return
        tickets = GaugeMetricFamily("sloop_tickets", "Tickets by state.", labels=["state"])
        counts = {str(state): int(n) for state, n in store.all("ticket_state_counts")}
        for state in api.TICKET_STATES:
            tickets.add_metric([state], counts.get(state, 0))
        yield tickets
        now = now_ms()
        queued = store.rows(TriggerRow, "triggers_queued")
        yield GaugeMetricFamily("sloop_triggers_queued", "Queued triggers.", value=len(queued))
        yield GaugeMetricFamily(
            "sloop_triggers_due",
            "Queued triggers already due.",
            value=sum(1 for t in queued if t.due_at_ms <= now),
        )
        in_flight = store.scalar("runs_in_flight_count")
        yield GaugeMetricFamily(
            "sloop_runs_in_flight",
            "Runs claimed or running.",
            value=int(in_flight or 0),
        )
        gate = GaugeMetricFamily(
            "sloop_gate_state", "1 for the gate's current state.", labels=["state"]
        )
        current, until = daemon.gate_state()
        for state in api.GATE_STATES:
            gate.add_metric([state], 1 if current == state else 0)
        yield gate
        yield GaugeMetricFamily(
            "sloop_gate_cooldown_until_seconds",
            "When the cooldown ends (epoch seconds), 0 when none.",
            value=(until or 0) / 1000,
        )
        yield GaugeMetricFamily(
            "sloop_runs_stalled", "Runs whose stage is stalled.", value=daemon.stalled_runs()
        )
        yield GaugeMetricFamily(
            "sloop_store_size_bytes", "Store file size with its WAL.", value=store.size_bytes()
        )
        yield GaugeMetricFamily(
            "sloop_requests_held",
            "logs and events requests held until their feed has news (wait_ms).",
            value=daemon.held_requests(),
        )
        yield GaugeMetricFamily(
            "sloop_log_cache_bytes",
            "Memory held by log records readers asked for (repo.log_cache bounds it).",
            value=daemon.log_cache_bytes(),
        )


async def serve_metrics(metrics: Metrics, host: str, port: int) -> asyncio.AbstractServer:
    """A minimal HTTP/1.1 endpoint: GET /metrics (and /) → the exposition."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, _, rest = request.partition(b" ")
            path = rest.split(b" ", 1)[0]
            if method not in (b"GET", b"HEAD"):
                status, body, ctype = b"405 Method Not Allowed", b"GET only\n", b"text/plain"
            elif path.split(b"?")[0] not in (b"/metrics", b"/"):
                status, body, ctype = b"404 Not Found", b"try /metrics\n", b"text/plain"
            else:
                status, body, ctype = (
                    b"200 OK",
                    metrics.exposition(),
                    CONTENT_TYPE_PLAIN_0_0_4.encode(),
                )
            head = (
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: "
                + ctype
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
            )
            writer.write(head if method == b"HEAD" else head + body)
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
        ):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port)


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--metrics wants HOST:PORT, not '{text}'")
    return host.strip("[]") or "127.0.0.1", int(port)
