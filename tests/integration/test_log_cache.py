"""Pages served from the log cache are the store's records, byte for byte (0.9.0).

Two runs print at once while a reader follows both (the sink appends what it
commits to each followed run's window) and rereads older pages (read-through, and
with a small ``repo.log_cache`` eviction and trimming between reads).  Every page's
records, read while the runs printed and after, must be the stored bodies of its
range exactly, whatever the cache held: off (``0``), a few records (``6KiB``), or
the default.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.agents import Bench, printer_argv, sloop_toml, ticket_text
from tests.support.daemon import wait_until

LINES = 400


def stored(bench: Bench, run: str, after: int, upto: int) -> bytes:
    """The bodies of positions (after, upto] as the store holds them, joined."""
    with bench.store() as conn:
        rows = conn.execute(
            "SELECT body FROM log_records WHERE run = ? AND position > ? AND position <= ?"
            " ORDER BY position",
            (run, after, upto),
        ).fetchall()
    return b",".join(b.encode() if isinstance(b, str) else bytes(b) for (b,) in rows)  # type: ignore[arg-type]


class Reader:
    """Pages by the hot request ``{run, after}``, raw, each kept with its range."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.pages: list[tuple[str, int, int, bytes]] = []  # run, after, upto, records
        self.ids = 0

    def page(self, run: str, after: int) -> dict[str, Any]:
        self.ids += 1
        args: dict[str, Any] = {"run": run, **({"after": str(after)} if after else {})}
        message = {"v": 1, "id": self.ids, "verb": "logs", "args": args}
        self.bench.client.send_raw(json.dumps(message).encode() + b"\n")
        line = self.bench.client.read_raw()
        reply = json.loads(line)
        assert reply["ok"], reply
        data = reply["data"]
        records = data["records"]
        if records:
            head = line.index(b'"records":[') + len(b'"records":[')
            tail = line.index(b'],"next_cursor":', head)
            upto = int(records[-1]["cursor"])
            assert upto == after + len(records)  # gapless: the page is a range
            self.pages.append((run, after, upto, line[head:tail]))
        return data  # type: ignore[no-any-return]


@pytest.mark.parametrize("log_cache", ["0", "6KiB", None])
def test_every_page_is_the_stores_bodies_whatever_the_cache_holds(
    bench: Bench, log_cache: str | None
) -> None:
    printer = printer_argv(
        bench,
        [
            {"do": "lines", "text": "line {n} ü \\\\ \"q\"", "first": 1, "last": LINES,
             "every": 0.002},
            {"do": "wait", "path": bench.flag("finish")},
        ],
    )  # fmt: skip
    flows = {"default": [{"name": "implement", "action": "agent", "command": printer}]}
    config = sloop_toml(bench.argv(), parallel=2, flows=flows)
    if log_cache is not None:
        config = config.replace("[repo]\n", f'[repo]\nlog_cache = "{log_cache}"\n', 1)
    bench.setup(config, {"one": ticket_text("One"), "two": ticket_text("Two")})
    bench.start()
    bench.post("one")
    bench.post("two")
    reader = Reader(bench)
    cursors = {"one#1": 0, "two#1": 0}
    printed = {"one#1": 0, "two#1": 0}

    def follow() -> bool:
        """One page of each run from its cursor, and one reread from the start."""
        for run in cursors:
            data = reader.page(run, cursors[run])
            cursors[run] = int(data["next_cursor"])
            texts = [r["text"] for r in data["records"] if r["stream"] == "stdout"]
            if texts:
                printed[run] = int(texts[-1].split()[1])
            reader.page(run, max(0, cursors[run] - 150))  # an older page: read-through
        return all(n == LINES for n in printed.values())

    wait_until(follow, timeout=120)
    bench.release("finish")
    run_ids: dict[str, str] = {}
    for run in cursors:
        run_ids[run] = bench.wait_run(run)["id"]
        while not (data := reader.page(run, cursors[run]))["terminal"] or not data["complete"]:
            cursors[run] = int(data["next_cursor"])
        for after in range(0, cursors[run], 37):
            reader.page(run, after)
            reader.page(run, after)  # again: from memory where it is held

    assert len(reader.pages) > 40
    for run, after, upto, records in reader.pages:
        assert records == stored(bench, run_ids[run], after, upto), (run, after)
