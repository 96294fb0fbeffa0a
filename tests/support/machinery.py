"""The daemon's run machinery in-process, over a recording launcher: nothing is spawned.

``Machinery.create`` builds what ``sloopd.server`` builds for the runs (a real
store in a temporary state directory, the log sink, ``sloopd.compose``'s object
graph) over a tiny git repository, with a ``FakeLauncher`` in place of both local
launchers.  Git runs (the run's checkout, its branch, the merge), children do
not: each is played from a ``Script``.  ``sandbox = "none"`` keeps git itself
out of bubblewrap, so these tests need no user namespaces.

Assertions read what was recorded: the fakes' records, the stage log replayed
by ``flows.walk`` and the run as ``show`` reports it, the log records the sink
stored.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from sloopd import compose
from sloopd.core import config
from sloopd.core.logsink import LogSink
from sloopd.core.paths import Layout
from sloopd.core.state import Daemon
from sloopd.flows import walk
from sloopd.flows.stagelog import read_log
from sloopd.queue import actions
from sloopd.queue.scheduler import Scheduler
from sloopd.runs.runner import RunManager
from sloopd.runs.runstate import ActiveRun, RunFacts
from sloopd.store import Store
from sloopd.util.clock import now_ms
from sloopd.views import runview
from sloopd.worker.credentials import Credential
from sloopd.worker.verbs import WorkerVerbs
from tests.support.agents import sloop_toml, ticket_text
from tests.support.fakes import FakeLauncher, FakeProcessGroups, Spawn


@dataclass
class Machinery:
    daemon: Daemon
    store: Store
    sink: LogSink
    launcher: FakeLauncher
    runs: RunManager
    verbs: WorkerVerbs

    @classmethod
    def create(
        cls,
        root: Path,
        repo: Path,
        flows: Mapping[str, Sequence[Mapping[str, Any]]],
        *,
        agent: Sequence[str] = ("agent", "--go"),
        extra: str = "",
        sandbox: str = "none",
    ) -> Machinery:
        text = sloop_toml(agent, flows=flows, sandbox=sandbox, extra=extra)
        settings = config.parse(tomllib.loads(text))
        state_dir = root / "state"
        state_dir.mkdir()
        store = Store.open(state_dir, migrate=True)
        layout = Layout(repo=repo, state_dir=state_dir, socket_dir=root / "s")
        active: dict[str, ActiveRun] = {}
        daemon = Daemon(layout=layout, config=settings, store=store, active_runs=active)
        sink = LogSink(store, None, daemon.feed_notices)
        launcher = FakeLauncher()
        # Both modes: whichever a run was admitted with, its children are fakes.
        runs = compose.run_manager(daemon, sink, active, {"bwrap": launcher, "none": launcher})
        return cls(daemon, store, sink, launcher, runs, WorkerVerbs(daemon, runs.records))

    @property
    def groups(self) -> FakeProcessGroups:
        return self.launcher.groups

    def close(self) -> None:
        self.sink.flush()
        self.store.close()

    def claim(self, name: str, flow: str | None = None) -> str:
        """Post ``tickets/<name>.md`` and claim it as the scheduler would: its run's id."""
        front: dict[str, str | int] = {"flow": flow} if flow else {}
        folder = self.daemon.layout.repo / "tickets"
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.md").write_text(ticket_text(f"Ticket {name}", "Do it.", **front))
        actions.post(self.daemon, {"path": f"tickets/{name}.md"})
        claimed = Scheduler(self.daemon, lambda _run: None).claim_due(now_ms())
        assert len(claimed) == 1, claimed
        return claimed[0]

    async def drive(self, name: str, flow: str | None = None) -> str:
        """Claim a run and drive it until it is settled; its id."""
        run_id = self.claim(name, flow)
        self.runs.start(run_id)
        task = self.runs.active[run_id].task
        assert task is not None
        await task
        return run_id

    async def prepared(self, name: str, flow: str | None = None) -> tuple[ActiveRun, RunFacts]:
        """A claimed run with its checkout and branch made as its driver makes them,
        for stages executed one by one (``execute``); nobody drives it."""
        run_id = self.claim(name, flow)
        active = ActiveRun(run_id, self.daemon.config)
        facts = self.runs.records.facts(run_id)
        base = await self.runs.branches.create(facts, self.daemon.config.repo.main)
        return active, replace(facts, base=base)

    async def execute(
        self, active: ActiveRun, facts: RunFacts, stage_name: str, attempt: int = 1
    ) -> walk.Execution:
        """One execution as the driver makes it: started, executed, its result recorded;
        the execution as the stored stage log says it went."""
        stage = next(s for s in facts.flow.stages if s.name == stage_name)
        records = self.runs.records
        records.append_steps(facts.run_id, walk.STAGE_STARTED, stage.name, attempt)
        result = await self.runs.executor.execute(active, facts, stage, attempt)
        records.finish(facts.run_id, stage, attempt, result)
        return self.walk(facts.run_id).executions[-1]

    def walk(self, run_id: str) -> walk.Walk:
        """The run's stage log as stored, replayed."""
        facts = self.runs.records.facts(run_id)
        return walk.replay(facts.flow, read_log(self.store, run_id))

    def shown(self, run_id: str) -> dict[str, Any]:
        """The run as ``show <run>`` reports it (live fields from the runs in flight)."""
        return runview.run_detail(self.daemon, run_id, self.daemon.active_runs.get(run_id))

    def log_texts(self, run_id: str, stream: str | None = None) -> list[str]:
        """The texts of the run's stored log records (of ``stream``), in order."""
        self.sink.flush()
        row = self.store.one("logs_page", (run_id, 0, 100_000))
        assert row is not None
        if not row[0]:
            return []
        records = orjson.loads(b"[" + bytes(row[0]) + b"]")
        return [r["text"] for r in records if stream is None or r["stream"] == stream]

    def credential_of(self, spawn: Spawn) -> Credential:
        """The credential a child presents with the token it was given."""
        return self.runs.credentials.check(spawn.env["SLOOP_RUN"], spawn.env.get("SLOOP_TOKEN"))

    def report(self, spawn: Spawn, verdict: str, reason: str = "looked at it") -> None:
        """What ``sloopctl verdict`` does from inside the child, with its own token."""
        args = {"verdict": verdict, "reason": reason}
        self.verbs.verdict(self.credential_of(spawn), args)
