"""The bare peers of benchmarks 4 and 5, run as their own processes.

``python -m benchmarks.servers logs STORE SOCKET``: a uvloop + apsw NDJSON server that
answers ``logs {run, after}`` with the same page as sloopd, the naive way: it reads the
rows, decodes each stored record into a Python dict, adds its cursor, and orjson-encodes
the reply (no run lookup, no selectors, no tails: the page and nothing else).

``python -m benchmarks.servers logs-floor STORE SOCKET``: the same page as sloopd's hot
path, byte for byte, built the way sloopd builds it (SQLite joins the records in one
range query on a kept cursor, the line is joined around them), with none of what the
daemon does around it: no envelope or argument checks, no run lookup, no metrics, no
log sink (it answers settled runs only).  The floor of this stack (uvloop, orjson, apsw)
for the page itself.

``python -m benchmarks.servers echo PAYLOAD SOCKET``: a uvloop + orjson server that decodes
each request line and answers with the JSON object in PAYLOAD, encoded afresh each time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import apsw
import orjson
import uvloop

from sloopd.store.queries import QUERIES
from sloopd.views.logpages import JSON_BOOL, PAGE_RECORDS, PAGE_REST

PAGE = 100
PAGE_SQL = (
    "SELECT position, body FROM log_records WHERE run = ? AND position > ?"
    " ORDER BY position LIMIT ?"
)


class LineServer(asyncio.Protocol):
    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        self.answer = answer
        self.transport: asyncio.Transport | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\n")
            if end < 0:
                return
            line, self.buffer = self.buffer[:end], self.buffer[end + 1 :]
            if self.transport is not None:
                self.transport.write(self.answer(line))


def logs_answer(store: Path) -> Callable[[bytes], bytes]:
    conn = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    # The same statement-cache setting as sloopd's store (DESIGN rule 4).
    conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)

    def answer(line: bytes) -> bytes:
        request = orjson.loads(line)
        args = request["args"]
        after = int(args.get("after") or 0)
        rows = conn.execute(PAGE_SQL, (args["run"], after, PAGE + 1)).fetchall()
        complete = len(rows) <= PAGE
        records = []
        for _position, body in rows[:PAGE]:
            # The naive way: every stored record decoded into a dict, then re-encoded.
            record: dict[str, Any] = orjson.loads(cast(str, body))
            records.append(record)
        data = {
            "records": records,
            "next_cursor": records[-1]["cursor"] if records else str(after),
            "complete": complete,
            "elided": 0,
            "terminal": True,
        }
        return orjson.dumps({"id": request["id"], "ok": True, "data": data}) + b"\n"

    return answer


def floor_answer(store: Path) -> Callable[[bytes], bytes]:
    conn = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
    conn.execute("BEGIN")  # one snapshot for good, as sloopd's reader between writes
    cursor = conn.cursor()
    ends: dict[str, int] = {}
    # The daemon's own query texts and page pieces: the floor cannot drift from them.
    page_sql, end_sql = QUERIES["logs_range"], QUERIES["logs_max_position"]

    def answer(line: bytes) -> bytes:
        request = orjson.loads(line)
        run, after = request["args"]["run"], int(request["args"].get("after") or 0)
        end = ends.get(run)
        if end is None:
            end = ends[run] = int(conn.execute(end_sql, (run,)).fetchall()[0][0] or 0)
        upto = min(after + PAGE, end)
        joined = cast(bytes, cursor.execute(page_sql, (run, after, upto)).fetchall()[0][0])
        head = b'{"id":%d,"ok":true,"data":' % request["id"]
        rest = PAGE_REST % (upto, JSON_BOOL[upto >= end], 0, JSON_BOOL[True])
        return b"".join((head, PAGE_RECORDS, joined or b"", rest, b"}\n"))

    return answer


def echo_answer(payload: Path) -> Callable[[bytes], bytes]:
    data = orjson.loads(payload.read_bytes())

    def answer(line: bytes) -> bytes:
        request = orjson.loads(line)
        return orjson.dumps({"id": request["id"], "ok": True, "data": data}) + b"\n"

    return answer


async def serve(answer: Callable[[bytes], bytes], path: str) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    server = await loop.create_unix_server(lambda: LineServer(answer), path=path)
    print(path, flush=True)
    await stop.wait()
    server.close()
    os.unlink(path)


def main(argv: list[str]) -> int:
    answers = {"logs": logs_answer, "logs-floor": floor_answer, "echo": echo_answer}
    if len(argv) != 3 or argv[0] not in answers:
        print(__doc__, file=sys.stderr)
        return 2
    kind, source, path = argv
    answer = answers[kind](Path(source))
    uvloop.run(serve(answer, path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
