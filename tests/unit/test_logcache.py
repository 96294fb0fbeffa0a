"""The log cache (sloopd.core.logcache): what it answers is the store's, within its bound.

Against a model (every run's committed bodies, as the store holds them) and against a
real store fed by the real sink: a join the cache answers is exactly the stored
bodies of that range; a refused or enclosed write leaves nothing held; memory stays
under the budget, the runs read longest ago going first.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import apsw
import pytest

from sloopd.core.logcache import BODY_OVERHEAD, WINDOW_OVERHEAD, LogCache
from sloopd.core.logsink import LogSink
from sloopd.store import Store, StoreUnavailable
from sloopd.views.logpages import LogPages


def body(run: str, position: int, size: int = 40) -> bytes:
    return b'{"cursor":"%d","run":"%s","text":"%s"}' % (position, run.encode(), b"x" * size)


def bodies(run: str, first: int, last: int) -> list[bytes]:
    return [body(run, p) for p in range(first, last + 1)]


def record(run: str, position: int) -> tuple[Any, ...]:
    """A committed record as the sink passes it (``logheld.Record``; the body is text)."""
    return (run, position, "implement", 1, position, position, "stdout", 0,
            body(run, position).decode())  # fmt: skip


def recount(cache: LogCache) -> int:
    """The cache's size as counted from what it holds."""
    windows = cache._windows.values()
    return sum(WINDOW_OVERHEAD + sum(len(b) + BODY_OVERHEAD for b in w.bodies) for w in windows)


def test_a_window_answers_only_ranges_it_holds_whole() -> None:
    cache = LogCache()
    cache.hold("R1", 10, bodies("R1", 11, 20))
    assert cache.join("R1", 10, 20) == b",".join(bodies("R1", 11, 20))
    assert cache.join("R1", 12, 15) == b",".join(bodies("R1", 13, 15))
    assert cache.join("R1", 9, 20) is None  # position 10 is not held
    assert cache.join("R1", 10, 21) is None  # nor 21
    assert cache.join("R2", 10, 20) is None
    assert cache.join("R1", 15, 15) == b""  # an empty range: nothing to join


def test_reads_that_touch_or_overlap_merge_and_a_distant_read_replaces() -> None:
    cache = LogCache()
    cache.hold("R1", 10, bodies("R1", 11, 20))
    cache.hold("R1", 20, bodies("R1", 21, 25))  # touches the end
    cache.hold("R1", 5, bodies("R1", 6, 12))  # overlaps the start
    cache.hold("R1", 0, bodies("R1", 1, 5))  # touches the start
    assert cache.join("R1", 0, 25) == b",".join(bodies("R1", 1, 25))
    cache.hold("R1", 2, bodies("R1", 3, 30))  # covers it and goes past it
    assert cache.join("R1", 0, 30) == b",".join(bodies("R1", 1, 30))
    assert cache.size == recount(cache)
    cache.hold("R1", 100, bodies("R1", 101, 110))  # the reader moved far on
    assert cache.join("R1", 0, 30) is None
    assert cache.join("R1", 100, 110) == b",".join(bodies("R1", 101, 110))
    assert cache.size == recount(cache)


def test_the_sink_extends_only_a_window_that_ends_where_its_records_begin() -> None:
    cache = LogCache()
    cache.committed([record("R1", 1)])  # nobody reads R1: nothing held
    assert cache.records == 0
    cache.hold("R1", 0, bodies("R1", 1, 5))
    cache.committed([record("R1", 6), record("R2", 1), record("R1", 7)])
    assert cache.join("R1", 0, 7) == b",".join(bodies("R1", 1, 7))
    assert cache.join("R2", 0, 1) is None
    cache.committed([record("R1", 9)])  # a gap (never so in the daemon): not held
    assert cache.join("R1", 7, 9) is None
    assert cache.join("R1", 0, 7) == b",".join(bodies("R1", 1, 7))
    assert cache.size == recount(cache)


def test_memory_stays_under_the_budget_the_runs_read_longest_ago_going_first() -> None:
    one_run = WINDOW_OVERHEAD + 10 * (len(body("R0", 1)) + BODY_OVERHEAD)
    cache = LogCache(3 * one_run + 10)
    for run in ("R1", "R2", "R3"):
        cache.hold(run, 0, bodies(run, 1, 10))
    assert cache.join("R1", 0, 10) is not None  # R1 read last: R2 goes next
    cache.hold("R4", 0, bodies("R4", 1, 10))
    # Past the budget, down to three quarters of it: R2, then R3, go.
    assert [cache.join(run, 0, 10) is not None for run in ("R1", "R2", "R3", "R4")] == [
        True,
        False,
        False,
        True,
    ]
    assert cache.size <= cache.budget * 3 // 4
    assert cache.size == recount(cache)


def test_a_window_alone_over_the_budget_keeps_its_newest_records() -> None:
    cost = len(body("R1", 1)) + BODY_OVERHEAD
    cache = LogCache(WINDOW_OVERHEAD + 100 * cost)
    cache.hold("R1", 0, bodies("R1", 1, 50))
    cache.committed([record("R1", p) for p in range(51, 131)])  # a followed run grows
    assert cache.size <= cache.budget
    assert cache.size == recount(cache)
    window = cache._windows["R1"]
    assert window.end == 130  # the follower's end is kept
    assert cache.join("R1", window.first - 1, 130) == b",".join(bodies("R1", window.first, 130))
    assert cache.join("R1", 0, 130) is None


def test_a_budget_of_zero_holds_nothing_and_a_lowered_budget_applies_at_the_next_fill() -> None:
    budget = [0]
    cache = LogCache(lambda: budget[0])
    assert not cache.admits("R1", 0, 10, True)
    cache.hold("R1", 0, bodies("R1", 1, 10))
    assert cache.records == 0
    assert cache.size == 0
    budget[0] = 1 << 20
    cache.hold("R1", 0, bodies("R1", 1, 10))
    cache.hold("R2", 0, bodies("R2", 1, 10))
    assert cache.records == 20
    budget[0] = 1  # a reload: the next fill evicts down to it
    cache.hold("R3", 0, bodies("R3", 1, 1))
    assert cache.size <= 1
    assert cache.records == 0


def test_whatever_is_read_and_committed_every_answer_is_the_stores() -> None:
    """Random reads (read-through), commits, budget changes: every join the cache
    answers equals the model store's bodies of that range; the count stays true."""
    rng = random.Random(36)
    stored: dict[str, int] = {"R1": 0, "R2": 0, "R3": 0}  # last committed position
    budget = [16000]
    cache = LogCache(lambda: budget[0])
    answered = 0
    for _ in range(5000):
        run = rng.choice(list(stored))
        action = rng.random()
        if action < 0.01:
            budget[0] = rng.choice([0, 4000, 16000, 60000])  # a reload: applies at a fill
            continue
        if action < 0.3:
            count = rng.randint(1, 8)
            cache.committed([record(run, stored[run] + i) for i in range(1, count + 1)])
            stored[run] += count
        elif action < 0.6 and stored[run]:
            after = max(0, stored[run] - rng.randint(1, 80))  # most readers follow the end
            upto = rng.randint(after + 1, min(stored[run], after + 30))
            cache.hold(run, after, bodies(run, after + 1, upto))
        elif stored[run]:
            after = max(0, stored[run] - rng.randint(0, 80))
            upto = rng.randint(after, stored[run])
            joined = cache.join(run, after, upto)
            if joined is not None:
                answered += 1
                assert joined == b",".join(bodies(run, after + 1, upto))
        assert cache.size == recount(cache)
        if action < 0.6:  # a fill: back under the bound
            assert cache.size <= budget[0]
    assert answered > 100, "the cache answered too little to have been tested"


# --- on a real store, fed by the real sink --------------------------------------------


def stored_bodies(store: Store, run: str, after: int, upto: int) -> bytes:
    conn = apsw.Connection(str(store.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute(
            "SELECT body FROM log_records WHERE run = ? AND position > ? AND position <= ?"
            " ORDER BY position",
            (run, after, upto),
        ).fetchall()
    finally:
        conn.close()
    return b",".join(r[0].encode() if isinstance(r[0], str) else bytes(r[0]) for r in rows)  # type: ignore[arg-type]


def lines(first: int, last: int) -> list[str]:
    return [f'line {n} ü \u2028 \\ "quoted"' for n in range(first, last + 1)]


def test_a_follower_reads_what_the_sink_committed_from_memory(store: Store) -> None:
    sink = LogSink(store)
    pages = LogPages(sink)
    sink.append_many("R1", "implement", 1, "stdout", lines(1, 30))
    sink.flush()
    assert pages.joined(store, "R1", 0, 30, True) == stored_bodies(store, "R1", 0, 30)
    sink.append_many("R1", "implement", 1, "stdout", lines(31, 75))
    sink.flush()
    # Never read from the store, yet held: the sink appended what it committed.
    assert sink.cache.join("R1", 30, 75) == stored_bodies(store, "R1", 30, 75)
    assert sink.cache.join("R1", 0, 75) == stored_bodies(store, "R1", 0, 75)


def test_a_refused_write_leaves_nothing_held(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = LogSink(store)
    pages = LogPages(sink)
    sink.append_many("R1", "implement", 1, "stdout", lines(1, 10))
    sink.flush()
    assert pages.joined(store, "R1", 0, 10, True) is not None  # R1 is read: its window exists
    real = store.writer.transaction

    @contextmanager
    def refusing() -> Iterator[Any]:
        raise StoreUnavailable(store.path, "full", "no space left on device")
        with real() as tx:  # pragma: no cover
            yield tx

    monkeypatch.setattr(store.writer, "transaction", refusing)
    sink.append_many("R1", "implement", 1, "stdout", lines(11, 20))
    assert not sink.flush()
    assert sink.cache.join("R1", 10, 11) is None  # held by the sink, not by the cache
    assert sink.cache.join("R1", 0, 10) == stored_bodies(store, "R1", 0, 10)
    monkeypatch.setattr(store.writer, "transaction", real)
    assert sink.flush()
    assert sink.cache.join("R1", 0, 20) == stored_bodies(store, "R1", 0, 20)


def test_rows_of_an_enclosing_transaction_that_rolls_back_are_never_held(store: Store) -> None:
    sink = LogSink(store)
    pages = LogPages(sink)
    sink.append_many("R1", "implement", 1, "stdout", lines(1, 10))
    sink.flush()
    assert pages.joined(store, "R1", 0, 10, True) is not None

    class Abandoned(Exception):
        pass

    def abandoned_after_flushing() -> None:
        with store.writer.transaction():
            sink.append_many("R1", "implement", 1, "stdout", lines(11, 20))
            sink.flush()  # its insert is part of the enclosing transaction
            raise Abandoned

    with pytest.raises(Abandoned):
        abandoned_after_flushing()
    assert stored_bodies(store, "R1", 10, 20) == b""
    assert sink.cache.join("R1", 10, 11) is None


def test_what_is_read_once_is_not_held_what_is_read_again_or_followed_is(store: Store) -> None:
    """Reading rows to hold them costs more than the one query that joins them: a log
    read once from end to end holds nothing; a page read again, or one that reaches the
    log's end (a follower), is held."""
    sink = LogSink(store)
    pages = LogPages(sink)
    sink.append_many("R1", "implement", 1, "stdout", lines(1, 500))
    sink.flush()
    for after in range(0, 400, 100):  # one pass, page after page
        assert pages.joined(store, "R1", after, after + 100, False) == stored_bodies(
            store, "R1", after, after + 100
        )
    assert sink.cache.records == 0
    assert pages.joined(store, "R1", 400, 500, True) == stored_bodies(store, "R1", 400, 500)
    assert sink.cache.join("R1", 400, 500) is not None  # the end: held at once
    pages.joined(store, "R1", 120, 220, False)
    assert sink.cache.join("R1", 120, 220) is None
    pages.joined(store, "R1", 150, 250, False)  # overlaps the read before: held
    assert sink.cache.join("R1", 150, 250) == stored_bodies(store, "R1", 150, 250)


def test_a_cache_without_budget_admits_nothing() -> None:
    cache = LogCache(0)
    assert not cache.admits("R1", 0, 100, True)
    assert not cache.admits("R1", 0, 100, False)
    assert not cache.admits("R1", 0, 100, False)
