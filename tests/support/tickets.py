"""Helpers for the queue tests: ticket files, a restartable daemon, the store's truth.

The daemon's scheduler is live: a trigger that is due for a ``ready`` ticket
is claimed at once and its run walks the flow.  The repositories made here set
the agent to ``false``, so such a run fails within a few hundred milliseconds
and never starts a real agent; tests that need a trigger to stay queued make it
due later (``later()``), and ``Operator.settle`` waits until nothing is left
for the scheduler to do.

The store is opened here only by tests, and only for two things the protocol
cannot do: reading the stored truth to compare the dashboard against, and
putting tickets in states no quick run reaches (``merged``, ``needs_review``,
``running`` without a run) while the daemon is stopped.  Product code never
opens the store outside ``sloopd/store``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from sloopd.wire.api import TERMINAL_TICKET_STATES
from tests.support.daemon import Client, make_repo, new_daemon, wait_until

STORE_FILE = "store.sqlite3"

# The ticket row of DESIGN "Wire shapes"; a row may gain fields, never lose these.
TICKET_ROW_KEYS = frozenset(
    {
        "id",
        "name",
        "title",
        "path",
        "project",
        "flow",
        "priority",
        "state",
        "created_at_ms",
        "updated_at_ms",
        "waiting",
    }
)
TRIGGER_ROW_KEYS = frozenset({"id", "ticket", "due_at_ms", "created_at_ms"})
STATUS_KEYS = frozenset({"daemon", "gate", "runs", "queued_triggers", "tickets"})
DASHBOARD_KEYS = STATUS_KEYS | {"kind", "recent", "recent_total", "recent_limit"}
HOUR_MS = 3_600_000

# The agent of every run these tests cause: it fails at once, so a claimed
# ticket settles 'failed' quickly and no real agent is ever started.
SLOOP_TOML = '[agent]\ncommand = ["false"]\n'

# One SQL statement and its bindings (a tuple, or a dict for named parameters).
Statement = tuple[str, tuple[Any, ...] | dict[str, Any]]


def ticket_text(
    title: str | None = None,
    body: str = "",
    *,
    front: str | None = None,
    **meta: str | int,
) -> str:
    """A ticket file: optional front matter (raw ``front`` or keyword keys), title, body."""
    lines: list[str] = []
    if front is not None or meta:
        lines.append("+++")
        if front is not None:
            lines.extend(front.splitlines())
        for key, value in meta.items():
            lines.append(f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}")
        lines.append("+++")
    if title is not None:
        lines.append(f"# {title}")
    if body:
        lines.extend(["", body])
    return "\n".join(lines) + "\n"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def later_ms(delta_ms: int = HOUR_MS) -> int:
    return now_ms() + delta_ms


def later(delta_ms: int = HOUR_MS) -> dict[str, int]:
    """A ``trigger`` argument due ``delta_ms`` from now: the scheduler leaves it queued."""
    return {"at_ms": later_ms(delta_ms)}


def queue_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    """A repository whose sloop.toml makes every run fail at once (see SLOOP_TOML)."""
    return make_repo(root, {"sloop.toml": SLOOP_TOML, **(files or {})})


def tick() -> None:
    """Let the wall clock move past the current millisecond (``updated_at_ms`` checks)."""
    start = now_ms()
    while now_ms() <= start:
        time.sleep(0.001)


# --- the store's truth ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreTruth:
    """What the store holds, read past the daemon."""

    states: dict[str, str]  # ticket id -> state
    queued: dict[str, list[str]]  # ticket id -> queued trigger ids, oldest first
    ticket_ids: list[str]  # every ticket id, by ordinal
    trigger_ids: list[str]  # every trigger id, by ordinal
    due: dict[str, int]  # trigger id -> due_at_ms, for every trigger

    @property
    def nonterminal(self) -> set[str]:
        return {t for t, s in self.states.items() if s not in TERMINAL_TICKET_STATES}

    @property
    def queued_count(self) -> int:
        return sum(len(ids) for ids in self.queued.values())


def store_path(state_dir: Path) -> Path:
    return state_dir / STORE_FILE


@contextmanager
def holding_write_lock(state_dir: Path) -> Iterator[None]:
    """Another process holding the store's write lock until the block ends.

    Taken with a busy timeout: the daemon's own short write transactions (a log flush,
    a reload's note) may hold the lock at that moment, and a lock taken without
    waiting then failed the test, not the daemon (seen under load).
    """
    conn = apsw.Connection(str(store_path(state_dir)))
    try:
        conn.setbusytimeout(10_000)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def store_truth(state_dir: Path) -> StoreTruth:
    """A read-only look at the store; safe while the daemon runs (WAL readers)."""
    conn = apsw.Connection(str(store_path(state_dir)), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.setbusytimeout(5000)
        tickets = list(conn.execute("SELECT id, state FROM tickets ORDER BY ordinal"))
        triggers = list(
            conn.execute("SELECT id, ticket, state, due_at_ms FROM triggers ORDER BY ordinal")
        )
    finally:
        conn.close()
    queued: dict[str, list[str]] = {}
    for trigger_id, ticket, state, _ in triggers:
        if state == "queued":
            queued.setdefault(str(ticket), []).append(str(trigger_id))
    return StoreTruth(
        states={str(t): str(s) for t, s in tickets},
        queued=queued,
        ticket_ids=[str(t) for t, _ in tickets],
        trigger_ids=[str(t[0]) for t in triggers],
        due={str(t[0]): int(t[3]) for t in triggers},
    )


def edit_store(state_dir: Path, statements: list[Statement]) -> None:
    """Run SQL on a store whose daemon is stopped (the daemon is its only writer)."""
    conn = apsw.Connection(str(store_path(state_dir)))
    try:
        with conn:
            for sql, params in statements:
                conn.execute(sql, params)
    finally:
        conn.close()


def state_changes(states: Mapping[str, str]) -> list[Statement]:
    """SQL putting tickets in ``states``, as the walk would leave them.

    A ticket that leaves ``ready``/``held`` had its trigger claimed by its run,
    so its queued triggers are marked claimed too.
    """
    statements: list[Statement] = []
    for ticket_id, state in states.items():
        statements.append(("UPDATE tickets SET state = ? WHERE id = ?", (state, ticket_id)))
        if state not in ("ready", "held"):
            statements.append(
                (
                    "UPDATE triggers SET state = 'claimed' WHERE ticket = ? AND state = 'queued'",
                    (ticket_id,),
                )
            )
    return statements


# --- a daemon that can be restarted on the same directories ---------------------


class Operator:
    """One daemon on a repository, its operator client, and a way to restart it.

    ``restart`` stops the daemon (which must exit 0), applies store edits at
    rest, and starts a new daemon on the same state and socket directories.
    """

    def __init__(self, root: Path, repo: Path, **env: str) -> None:
        self.root = root
        self.repo = repo
        self.env = env  # the daemon's extra environment, kept across restarts
        self.process = new_daemon(root, repo, **env).start()
        self.client: Client = self.process.client()

    @property
    def state_dir(self) -> Path:
        return self.process.state_dir

    def ok(self, verb: str, args: dict[str, Any] | None = None) -> Any:
        return self.client.ok(verb, args)

    def error(self, verb: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.client.error(verb, args)

    def write(self, relative: str, text: str) -> Path:
        target = self.repo / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return target

    def post(self, path: str | Path, **args: Any) -> dict[str, Any]:
        data: dict[str, Any] = self.ok("post", {"path": str(path), **args})
        return data

    def dashboard(self, **args: Any) -> dict[str, Any]:
        data: dict[str, Any] = self.ok("show", args)
        assert data["kind"] == "dashboard", data
        return data

    def detail(self, ref: str) -> dict[str, Any]:
        data: dict[str, Any] = self.ok("show", {"ref": ref})
        assert data["kind"] == "ticket", data
        value: dict[str, Any] = data["value"]
        return value

    def truth(self) -> StoreTruth:
        return store_truth(self.state_dir)

    def settle(self, timeout: float = 20.0) -> dict[str, Any]:
        """Wait until no run is in flight and no ready ticket has a due trigger.

        Returns the quiet dashboard.  One dashboard is one consistent read:
        the daemon answers it without yielding to the scheduler.
        """

        def quiet() -> dict[str, Any] | None:
            board = self.dashboard()
            held = {t["id"] for t in board["tickets"] if t["state"] == "held"}
            now = now_ms()
            # A closed gate claims nothing: due triggers stay queued until it opens.
            claimable = [
                t
                for t in board["queued_triggers"]
                if t["due_at_ms"] <= now and t["ticket"] not in held
            ]
            if board["gate"]["state"] != "open":
                claimable = []
            return None if board["runs"] or claimable else board

        board: dict[str, Any] = wait_until(quiet, timeout=timeout)
        return board

    def restart(
        self,
        states: Mapping[str, str] | None = None,
        extra: list[Statement] | None = None,
    ) -> None:
        # A run in flight at shutdown would be aborted and queued again.
        self.settle()
        self.stop()
        statements = state_changes(states or {}) + (extra or [])
        if statements:
            edit_store(self.state_dir, statements)
        self.process = new_daemon(self.root, self.repo, **self.env).start()
        self.client = self.process.client()

    def stop(self) -> None:
        if self.process.alive():
            code = self.process.stop()
            assert code == 0, self.process.log()


def by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in rows}


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


def reason(row: dict[str, Any]) -> str | None:
    """The ``waiting.reason`` of a ticket row (None when nothing holds it back)."""
    waiting = row["waiting"]
    if waiting is None:
        return None
    assert set(waiting) >= {"reason", "message"}, waiting
    assert isinstance(waiting["message"], str), waiting
    assert waiting["message"], waiting
    value: str = waiting["reason"]
    return value
