"""A test-only check that the read model tells the store's truth (``SLOOPD_READ_MODEL_AUDIT``).

With the variable set to a file path, the daemon derives its read model from
scratch after every committed transaction and after every dashboard it serves,
compares, and appends one JSON line per comparison to that file:
``{"at": "commit" | "show", "epoch", "equal", "differences"}``.  The property
test (tests/integration/test_queue_property.py) sets it and asserts every line
is equal.  It is an environment variable rather than a verb so that nothing of
it is part of the protocol: no client can ask a daemon to do a full derivation
per write, and an operator has no reason to set it.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Final

import orjson

from sloopd.core.model import RECENT_HELD_MAX, Snapshot, derive
from sloopd.core.state import Daemon
from sloopd.store.changes import Change
from sloopd.util.clock import now_ms
from sloopd.views.board import (
    attention_runs,
    in_flight_rows,
    live_recent_row,
    live_total,
    merge_queue_part,
    queue_fields,
)

AUDIT_ENV: Final = "SLOOPD_READ_MODEL_AUDIT"


def compose(daemon: Daemon, snapshot: Snapshot, limit: int) -> dict[str, Any]:
    """The dashboard as plain data, from a snapshot, with no cache in the way."""
    view: dict[str, Any] = {"kind": "dashboard", "daemon": daemon.info()}
    view["gate"] = snapshot.gate.row()
    view["runs"] = in_flight_rows(daemon, snapshot)
    part = merge_queue_part(daemon)
    if part:
        view.update(orjson.loads(b"{" + part[1:] + b"}"))
    attention, attention_total = attention_runs(daemon)
    view["attention"] = [orjson.loads(run.encoded) for run in attention]
    view["attention_total"] = attention_total
    view.update(queue_fields(daemon, snapshot, now_ms())[0])
    view["recent"] = [orjson.loads(live_recent_row(daemon, r)) for r in snapshot.recent[:limit]]
    view.update(recent_total=snapshot.recent_total, recent_limit=limit)
    view["usage"] = live_total(daemon, snapshot)
    return view


def _comparable(view: dict[str, Any]) -> dict[str, Any]:
    """What two readings a moment apart must agree on: all but the clock's fields."""
    view = {k: v for k, v in view.items() if k != "epoch"}
    view["daemon"] = {k: v for k, v in view["daemon"].items() if k != "uptime_ms"}
    view["runs"] = [{k: v for k, v in run.items() if k != "stall"} for run in view["runs"]]
    return view


class Audit:
    def __init__(self, daemon: Daemon, path: Path) -> None:
        self.daemon = daemon
        self.path = path

    @classmethod
    def from_environment(cls, daemon: Daemon) -> Audit | None:
        path = os.environ.get(AUDIT_ENV)
        if not path or daemon.model is None or daemon.store is None:
            return None
        audit = cls(daemon, Path(path))
        writer = daemon.store.writer
        observe = writer.observer

        def observed(changes: list[Change]) -> None:
            if observe is not None:
                observe(changes)
            audit.committed()

        writer.observer = observed
        return audit

    def committed(self) -> None:
        model = self.daemon.model
        assert model is not None
        held = model.snapshot
        fresh = derive(model.store, model.held)
        differences = [
            f.name for f in fields(Snapshot) if getattr(held, f.name) != getattr(fresh, f.name)
        ]
        self._record("commit", differences, held, fresh)

    def served(self, data: bytes, limit: int) -> None:
        model = self.daemon.model
        assert model is not None
        fresh = compose(
            self.daemon, derive(model.store, max(model.held, min(limit, RECENT_HELD_MAX))), limit
        )
        served = orjson.loads(data)
        if limit > RECENT_HELD_MAX:
            fresh["recent"] = served["recent"]  # read from the store: nothing held to audit
        expected, got = _comparable(fresh), _comparable(served)
        keys = expected.keys() | got.keys()
        differences = sorted(k for k in keys if expected.get(k) != got.get(k))
        self._record("show", differences, got, expected)

    def _record(self, at: str, differences: list[str], held: Any, fresh: Any) -> None:
        line: dict[str, Any] = {
            "at": at,
            "epoch": self.daemon.changes.epoch,
            "equal": not differences,
            "differences": differences,
        }
        if differences:
            line["held"] = repr(held)[:4000]
            line["fresh"] = repr(fresh)[:4000]
        with self.path.open("ab") as out:
            out.write(orjson.dumps(line) + b"\n")
