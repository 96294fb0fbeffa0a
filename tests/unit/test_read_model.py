"""The read model against its store, with no daemon: random writes, then model == derive.

The queue's state machine (tests/integration/test_queue_property.py) drives a real
daemon, whose runs all fail at once and report no usage.  This one writes to a
store directly through the named queries the daemon uses, so it also reaches what
that daemon never shows quickly: runs in flight for a while, stage results with
usage and cost, a settled run's worktree removed, a step appended to a settled
run, triggers moved by an early resume, and recent windows of every size.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sloopd.core.changelog import ChangeLog
from sloopd.core.model import ReadModel, derive
from sloopd.store import Store, StoreUnavailable

NOW = 1_700_000_000_000


class StoreWriter:
    """The daemon's writes, one transaction each, through the daemon's named queries."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = itertools.count(NOW, 7)
        self.names = itertools.count(1)

    def tick(self) -> int:
        return next(self.clock)

    def post(self, state: str, due: int | None) -> str:
        name = f"t{next(self.names)}"
        with self.store.writer.transaction() as tx:
            row = tx.one(
                "ticket_insert",
                {
                    "name": name,
                    "path": f"tickets/{name}.md",
                    "title": name,
                    "body": "",
                    "project": "",
                    "flow": "default",
                    "priority": 0,
                    "state": state,
                    "manual": 0,
                    "now": self.tick(),
                },
            )
            assert row is not None
            if due is not None:
                tx.run("trigger_insert", {"ticket": row[0], "due": due, "now": self.tick()})
        return str(row[0])

    def claim(self, ticket: str, trigger: str, attempt: int) -> str:
        with self.store.writer.transaction() as tx:
            row = tx.one(
                "run_insert",
                {
                    "alias": f"{ticket}#{attempt}",
                    "ticket": ticket,
                    "attempt": attempt,
                    "trigger": trigger,
                    "flow": "default",
                    "snapshot": "{}",
                    "branch": f"sloop/{ticket}/{attempt}",
                    "now": self.tick(),
                },
            )
            assert row is not None
            tx.run("run_set_worktree", (f"/checkouts/{row[0]}", row[0]))
            tx.run("trigger_claim", {"id": trigger, "run": row[0]})
            tx.run("ticket_set_state", {"id": ticket, "state": "running", "now": self.tick()})
        return str(row[0])

    def step(self, run: str, usage: dict[str, Any] | None) -> None:
        data = {"passed": True, **({"usage": usage} if usage else {})}
        with self.store.writer.transaction() as tx:
            tx.run(
                "stage_log_append",
                {
                    "run": run,
                    "kind": "stage_finished",
                    "stage": "implement",
                    "attempt": 1,
                    "seat": None,
                    "at": self.tick(),
                    "data": orjson.dumps(data).decode(),
                },
            )

    def settle(self, run: str, ticket: str, state: str, finished: int) -> None:
        with self.store.writer.transaction() as tx:
            tx.run(
                "stage_log_append",
                {
                    "run": run,
                    "kind": "halted",
                    "stage": None,
                    "attempt": None,
                    "seat": None,
                    "at": finished,
                    "data": "{}",
                },
            )
            tx.run(
                "run_settle",
                {
                    "id": run,
                    "state": state,
                    "now": finished,
                    "halt": None,
                    "reason": None if state == "merged" else "a stage failed",
                    "agent_exit_code": 0,
                    "classification": None,
                },
            )
            tx.run("ticket_set_state", {"id": ticket, "state": state, "now": finished})


USAGE = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "input_tokens": st.integers(0, 10_000),
            "output_tokens": st.integers(0, 10_000),
            "cached_tokens": st.integers(0, 1000),
            "cost_usd": st.one_of(st.none(), st.floats(0, 5, allow_nan=False)),
        }
    ),
)


class ModelMachine(RuleBasedStateMachine):
    """One store for every example (names and the clock go on across them)."""

    store: ClassVar[Store]
    model: ClassVar[ReadModel]
    writer: ClassVar[StoreWriter]

    def __init__(self) -> None:
        super().__init__()
        self.queued: dict[str, str] = {}  # ticket -> its queued trigger
        self.flying: dict[str, str] = {}  # run -> its ticket
        self.settled: list[str] = []
        self.attempts: dict[str, int] = {}

    @rule(held=st.booleans(), later=st.booleans())
    def post(self, held: bool, later: bool) -> None:
        due = NOW + 3_600_000 if later else NOW
        ticket = self.writer.post("held" if held else "ready", due)
        trigger = self.store.one("trigger_queued_for_ticket", (ticket,))
        assert trigger is not None
        self.queued[ticket] = str(trigger[0])

    @precondition(lambda self: self.queued)
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(sorted(self.queued)))
        attempt = self.attempts[ticket] = self.attempts.get(ticket, 0) + 1
        run = self.writer.claim(ticket, self.queued.pop(ticket), attempt)
        self.flying[run] = ticket

    @precondition(lambda self: self.flying)
    @rule(data=st.data(), usage=USAGE)
    def stage(self, data: st.DataObject, usage: dict[str, Any] | None) -> None:
        self.writer.step(data.draw(st.sampled_from(sorted(self.flying))), usage)

    @precondition(lambda self: self.flying)
    @rule(
        data=st.data(),
        state=st.sampled_from(["merged", "failed", "needs_review", "aborted"]),
        # Out of order at times: a recovery settles with its own clock.
        back=st.integers(0, 50),
    )
    def settle(self, data: st.DataObject, state: str, back: int) -> None:
        run = data.draw(st.sampled_from(sorted(self.flying)))
        ticket = self.flying.pop(run)
        self.writer.settle(run, ticket, state, self.writer.tick() - back)
        self.settled.append(run)

    @rule(count=st.integers(1, 15))
    def many_runs(self, count: int) -> None:
        """Enough settled runs at once to push earlier ones out of the recent window."""
        for _ in range(count):
            ticket = self.writer.post("ready", NOW)
            trigger = self.store.one("trigger_queued_for_ticket", (ticket,))
            assert trigger is not None
            run = self.writer.claim(ticket, str(trigger[0]), 1)
            self.writer.step(
                run, {"input_tokens": 1, "output_tokens": 2, "cached_tokens": 0, "cost_usd": 0.1}
            )
            self.writer.settle(run, ticket, "failed", self.writer.tick())
            self.settled.append(run)

    @precondition(lambda self: self.settled)
    @rule(data=st.data())
    def remove_worktree(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from(self.settled))
        with self.store.writer.transaction() as tx:
            tx.run("run_clear_worktree", (run,))

    @precondition(lambda self: self.settled)
    @rule(data=st.data(), usage=USAGE)
    def step_after_settle(self, data: st.DataObject, usage: dict[str, Any] | None) -> None:
        """Never written today; the model must stay right if it ever is."""
        self.writer.step(data.draw(st.sampled_from(self.settled)), usage)

    @rule(state=st.sampled_from(["open", "paused", "cooldown"]))
    def gate(self, state: str) -> None:
        until = NOW + 3_600_000 if state == "cooldown" else None
        with self.store.writer.transaction() as tx:
            tx.run("gate_write", {"state": state, "until": until, "reason": None, "now": NOW})

    @rule()
    def resume_early(self) -> None:
        """An operator's resume makes the triggers due at the cooldown's end due now."""
        with self.store.writer.transaction() as tx:
            tx.run("triggers_due_now", {"due": NOW + 3_600_000, "now": self.writer.tick()})

    @rule(limit=st.integers(1, 40))
    def show_more(self, limit: int) -> None:
        assert self.model.hold_recent(limit)
        snapshot = self.model.snapshot
        assert len(snapshot.recent) == min(self.model.held, snapshot.recent_total)

    @rule()
    def refused(self) -> None:
        """A transaction that noted writes and then rolled back."""
        before = self.model.changes.epoch
        # The raise is the point: writes noted, then the transaction refused half-way.
        with pytest.raises(RuntimeError), self.store.writer.transaction() as tx:  # noqa: PT012
            tx.run("gate_write", {"state": "paused", "until": None, "reason": "x", "now": NOW})
            for run in self.flying:
                tx.run("run_started", {"id": run, "now": NOW})
            raise RuntimeError("refused half-way")
        assert self.model.changes.epoch == before

    @invariant()
    def the_model_equals_a_fresh_derivation(self) -> None:
        assert self.model.current() == derive(self.store, self.model.held)

    @invariant()
    def the_queue_part_moves_only_with_its_revision(self) -> None:
        """The dashboard re-encodes its queue part on the queue revision, not the epoch:
        while the revision stands, the tickets, triggers and gate must too."""
        snapshot = self.model.current()
        queue = (dict(snapshot.tickets), dict(snapshot.triggers), snapshot.gate)
        kept = getattr(self, "_queue_seen", None)
        if kept is not None and kept[0] == self.model.queue_revision:
            assert kept[1] == queue
        self._queue_seen = (self.model.queue_revision, queue)


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[tuple[Store, ChangeLog, ReadModel]]:
    store = Store.open(tmp_path / "state")
    changes = ChangeLog(NOW)
    model = ReadModel.install(store, changes)
    yield store, changes, model
    store.close()


def test_the_model_follows_every_kind_of_write(
    opened: tuple[Store, ChangeLog, ReadModel],
) -> None:
    store, _, model = opened

    class Machine(ModelMachine):
        pass

    Machine.store, Machine.model, Machine.writer = store, model, StoreWriter(store)
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_every_commit_that_noted_a_change_moves_the_epoch_and_no_other_does(
    opened: tuple[Store, ChangeLog, ReadModel],
) -> None:
    store, changes, _ = opened
    writer = StoreWriter(store)
    first = changes.epoch
    writer.post("ready", None)
    assert changes.epoch == first + 1
    with store.writer.transaction() as tx:
        tx.run("event_insert", {"kind": "k", "at": NOW, "ticket": None, "run": None, "data": "{}"})
    assert changes.epoch == first + 1


def test_a_revision_that_fails_is_repaired_by_a_fresh_derivation(
    opened: tuple[Store, ChangeLog, ReadModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, changes, model = opened
    writer = StoreWriter(store)
    real_one = store.one

    def refusing(query: str, params: Any = ()) -> Any:
        if query == "ticket_by_id":
            raise StoreUnavailable(store.path, "io", "a read refused right after the commit")
        return real_one(query, params)

    monkeypatch.setattr(store, "one", refusing)
    before = changes.epoch
    ticket = writer.post("ready", NOW)  # committed; its revision fails
    monkeypatch.setattr(store, "one", real_one)
    assert changes.epoch > before  # told anyway: the store did change
    assert ticket in model.current().tickets
    assert model.current() == derive(store, model.held)
