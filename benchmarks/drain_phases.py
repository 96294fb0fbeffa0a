"""Where each run of benchmark 11 spent its milliseconds, read from the daemon's store.

Read after the daemon stopped, read-only.  Every time comes from what the daemon
itself recorded: a run's ``claimed_at_ms``/``started_at_ms``/``finished_at_ms``, the
stage log's ``stage_started``/``stage_finished``/``returned`` steps, and the ``ts_ms``
of the agent's two output lines (``agent start``, ``agent done``: when the daemon read
them), which split the implement stage into its start, the agent and what follows.
Each phase is a difference of two of those times, so the phases of a run add up to
its claim-to-settled time.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import orjson

from sloopd.store.db import STORE_FILE

# (key, what the phase holds), in a run's order.
PHASES: tuple[tuple[str, str], ...] = (
    ("prepare", "claim → started: sandbox probe, worker socket, checkout create, base refs"),
    ("lead", "started → implement started"),
    ("spawn", "implement start → agent's first line: HOME, credential, prompt, bwrap, sh"),
    ("agent", "the agent: first → last line (git add + commit in the sandbox)"),
    ("collect", "agent's last line → implement finished: exit, git status, bring back"),
    ("sync", "sync executions: the merge in the scratch repository, refs (main's slot held)"),
    ("merge", "ff_only executions (under the merge lock)"),
    ("gaps", "between stages: step writes, replay, returned"),
    ("settle", "last stage finished → settled: checkout removed, settle"),
)


@dataclass
class Phases:
    runs: int = 0
    merged: int = 0
    resyncs: int = 0
    wall_s: float = 0.0
    queued_ms: float = 0.0  # resume → claimed, summed (waiting, not a cost of the run)
    total_ms: float = 0.0  # claimed → settled, summed
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    missing: int = 0  # runs whose agent lines were not found (phases then skipped)
    # "state: reason" of each run that settled without merging, and how many: a drain
    # that merged less than it was given says why in its own table.
    unmerged: Counter[str] = field(default_factory=Counter)

    def mean(self, key: str) -> float:
        return self.sums[key] / max(1, self.runs - self.missing)

    def lines(self) -> list[str]:
        out = []
        for key, what in PHASES:
            out.append(f"{self.mean(key):8.1f} ms  {what}")
        total = self.total_ms / max(1, self.runs)
        out.append(f"{total:8.1f} ms  in all, claim → settled (runs overlap: {self.runs} runs)")
        out.append(f"{self.queued_ms / max(1, self.runs):8.1f} ms  waiting: resume → claimed")
        if self.missing:
            out.append(f"({self.missing} runs without both agent lines left out of the phases)")
        for why, count in self.unmerged.most_common(5):
            out.append(f"not merged: {count} runs, {why}")
        return out


def _agent_lines(db: apsw.Connection) -> dict[str, dict[str, int]]:
    """run → {"agent start": ts, "agent done": ts} from the implement stage's output."""
    found: dict[str, dict[str, int]] = defaultdict(dict)
    query = (
        "SELECT run, ts_ms, body FROM log_records WHERE stage = 'implement' AND stream != 'system'"
    )
    for run, ts, body in db.execute(query):
        text = orjson.loads(body).get("text", "")
        if text in ("agent start", "agent done"):
            found[run].setdefault(text, ts)
    return found


def read_phases(state_dir: Path, resumed_ms: float) -> Phases:
    db = apsw.Connection(str(state_dir / STORE_FILE), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return _read(db, resumed_ms)
    finally:
        db.close()


def _read(db: apsw.Connection, resumed_ms: float) -> Phases:
    phases = Phases()
    steps: dict[str, list[tuple[str, str | None, int]]] = defaultdict(list)
    for run, kind, stage, at in db.execute(
        "SELECT run, kind, stage, at_ms FROM stage_log ORDER BY run, seq"
    ):
        steps[run].append((kind, stage, at))
    agent = _agent_lines(db)
    last_ms = resumed_ms
    for run, state, reason, claimed, started, finished in db.execute(
        "SELECT id, state, reason, claimed_at_ms, started_at_ms, finished_at_ms FROM runs"
    ):
        phases.runs += 1
        phases.merged += state == "merged"
        if state != "merged":
            phases.unmerged[f"{state}: {(reason or '-')[:160]}"] += 1
        if finished is None or started is None:
            phases.missing += 1
            continue
        last_ms = max(last_ms, finished)
        phases.total_ms += finished - claimed
        phases.queued_ms += claimed - resumed_ms
        _one_run(phases, steps[run], agent.get(run, {}), claimed, started, finished)
    phases.wall_s = (last_ms - resumed_ms) / 1000
    return phases


def _one_run(
    phases: Phases,
    steps: list[tuple[str, str | None, int]],
    agent: dict[str, int],
    claimed: int,
    started: int,
    finished: int,
) -> None:
    if "agent start" not in agent or "agent done" not in agent:
        phases.missing += 1
        return
    sums: dict[str, float] = defaultdict(float)
    sums["prepare"] = started - claimed
    opened: int | None = None
    previous_end = started
    first = True
    for kind, stage, at in steps:
        if kind == "returned":
            phases.resyncs += 1
        elif kind == "stage_started":
            sums["lead" if first else "gaps"] += at - previous_end
            opened = at
        elif kind == "stage_finished" and opened is not None and stage is not None:
            if stage == "implement" and first:
                sums["spawn"] += agent["agent start"] - opened
                sums["agent"] += agent["agent done"] - agent["agent start"]
                sums["collect"] += at - agent["agent done"]
            else:
                sums["merge" if stage == "merge" else "sync"] += at - opened
            first, opened, previous_end = False, None, at
    sums["settle"] = finished - previous_end
    for key, value in sums.items():
        phases.sums[key] += value
