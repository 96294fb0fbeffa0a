"""The metrics check: the daemon's Prometheus series, else its dashboard's counts.

``urllib`` is imported only when a metrics URL is given.
"""

from __future__ import annotations

import re
import time
from typing import Final

from sloopctl.diagnosis.facts import Doctor, mapping, rows
from sloopctl.diagnosis.report import NOT_REACHABLE, Check
from sloopctl.locate import METRICS_URL_ENV

METRICS_TIMEOUT_S: Final = 2.0
METRICS_MAX_BYTES: Final = 8 * 1024 * 1024

_SAMPLE: Final = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL: Final = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]


def parse_exposition(text: str) -> list[Sample]:
    """Samples of the Prometheus text format (enough of it for the doctor's view)."""
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        pairs = {k: _unescape(v) for k, v in _LABEL.findall(labels or "")}
        samples.append((name, pairs, number))
    return samples


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def _by_label(samples: list[Sample], name: str, label: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for sample_name, labels, value in samples:
        if sample_name == name:
            key = labels.get(label, "")
            totals[key] = totals.get(key, 0.0) + value
    return totals


def metrics_summary(samples: list[Sample]) -> str:
    def total(name: str) -> str:
        values = [v for n, _, v in samples if n == name]
        return _number(sum(values)) if values else "n/a"

    gate = [state for state, v in _by_label(samples, "sloop_gate_state", "state").items() if v]
    finished = _by_label(samples, "sloop_runs_finished_total", "state")
    errors = {
        code: n
        for code, n in _by_label(samples, "sloop_requests_total", "code").items()
        if code != "ok" and n
    }
    words = [
        f"runs in flight {total('sloop_runs_in_flight')}",
        f"triggers queued {total('sloop_triggers_queued')} (due {total('sloop_triggers_due')})",
        f"gate {'/'.join(gate) or 'n/a'}",
        "runs finished "
        + (" ".join(f"{s}={_number(n)}" for s, n in sorted(finished.items())) or "none"),
        f"request errors {_number(sum(errors.values()))}"
        + (
            " (" + ", ".join(f"{c}={_number(n)}" for c, n in sorted(errors.items())) + ")"
            if errors
            else ""
        ),
    ]
    return ", ".join(words)


def fetch_metrics(url: str) -> str:
    """GET ``url`` directly (no proxy), within METRICS_TIMEOUT_S."""
    import urllib.parse
    import urllib.request

    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=METRICS_TIMEOUT_S) as response:
        body: bytes = response.read(METRICS_MAX_BYTES)
    return body.decode("utf-8", errors="replace")


def check_metrics(d: Doctor) -> Check:
    name = "metrics"
    url = d.options.metrics_url
    if url:
        try:
            samples = parse_exposition(fetch_metrics(url))
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            return Check(
                name,
                "fail",
                f"cannot read {url}: {getattr(exc, 'reason', None) or exc}",
                "check the URL against sloopd's '--metrics HOST:PORT' (http://HOST:PORT/metrics)",
            )
        if not any(n.startswith("sloop_") for n, _, _ in samples):
            return Check(
                name, "warn", f"{url} serves no sloop_ series", "point it at sloopd's --metrics"
            )
        return Check(name, "ok", f"{url}: {metrics_summary(samples)}")
    if not d.up:
        return Check(name, "warn", NOT_REACHABLE)
    now = time.time_ns() // 1_000_000
    triggers = rows(d.dashboard.get("queued_triggers"))
    due = sum(1 for t in triggers if isinstance(t.get("due_at_ms"), int) and t["due_at_ms"] <= now)
    gate = mapping(d.dashboard.get("gate")).get("state")
    return Check(
        name,
        "ok",
        f"from the dashboard: runs in flight {len(rows(d.dashboard.get('runs')))}, "
        f"triggers queued {len(triggers)} (due {due}), gate {gate} "
        f"(--metrics-url or ${METRICS_URL_ENV} shows the Prometheus series)",
    )
