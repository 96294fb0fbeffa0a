"""``python -m benchmarks [NAME ...] [--quick] [--markdown FILE]``: run, print one table each.

Names: ingest, logs, events, throughput, dashboard, sandbox, memory, longpoll, rss,
stagestart, drain, ray, queue, treesize (or their numbers 1-14; ray needs
``scripts/in-netns``); none = all.  After the tables, issue 15's
table gathered from them.
``--quick`` shrinks sizes and windows for a smoke run (about a minute).
Exit status: 0 when every benchmark ran (goals met or not; the tables say), 1 when one
failed to run, 3 when a feed query's plan sorts in a temporary B-tree.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from benchmarks import (
    dashboard,
    drain,
    events,
    ingest,
    logs,
    longpoll,
    memory,
    queue,
    ray_stages,
    rss,
    sandbox_start,
    stagestart,
    throughput,
    treesize,
)
from benchmarks.common import Table, load_average, machine
from benchmarks.summary import summary

BENCHMARKS: dict[str, Callable[[bool], Table]] = {
    "ingest": ingest.run,
    "logs": logs.run,
    "events": events.run,
    "throughput": throughput.run,
    "dashboard": dashboard.run,
    "sandbox": sandbox_start.run,
    "memory": memory.run,
    "longpoll": longpoll.run,
    "rss": rss.run,
    "stagestart": stagestart.run,
    "drain": drain.run,
    "ray": ray_stages.run,
    "queue": queue.run,
    "treesize": treesize.run,
}
NUMBERS = {str(i): name for i, name in enumerate(BENCHMARKS, 1)}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(BENCHMARKS))
    parser.add_argument("--quick", action="store_true", help="small sizes, short windows")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown")
    args = parser.parse_args(argv)
    chosen = []
    for name in args.names or list(BENCHMARKS):
        name = NUMBERS.get(name, name)
        if name not in BENCHMARKS:
            parser.error(f"unknown benchmark {name!r} (known: {', '.join(BENCHMARKS)})")
        chosen.append(name)
    args.names = chosen
    return args


def header(quick: bool) -> list[str]:
    info = machine()
    load = load_average()
    return [
        f"sloop benchmarks ({'quick' if quick else 'full'} run), {info['date']}",
        f"machine: {info['nproc']} CPUs, {info['cpu']}, Linux {info['kernel']}",
        f"Python {info['python']}, SQLite {info['sqlite']} (apsw {info['apsw']})",
        f"load average at start: {load}",
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    lines = header(args.quick)
    print("\n".join(lines), flush=True)
    tables: list[Table] = []
    failed: list[str] = []
    started = time.monotonic()
    for name in args.names:
        print(f"\n-- running {name} ...", flush=True)
        began = time.monotonic()
        try:
            table = BENCHMARKS[name](args.quick)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        table.notes.append(
            f"({name} took {time.monotonic() - began:.0f} s; load average after: {load_average()})"
        )
        tables.append(table)
        print(table.text(), flush=True)
    if tables:
        issue = summary(tables, args.quick)
        print("\n" + issue.text(), flush=True)
    load = load_average()
    print(f"\nall done in {time.monotonic() - started:.0f} s; load average at end: {load}")
    alarms = [a for t in tables for a in t.alarms]
    for alarm in alarms:
        print(f"!!! {alarm}")
    if failed:
        print(f"FAILED to run: {', '.join(failed)}")
    if args.markdown is not None:
        body = ["```", *lines, f"load average at end: {load}", "```", ""]
        body += [t.markdown() for t in tables]
        if tables:
            body.append(summary(tables, args.quick).markdown())
        args.markdown.write_text("\n".join(body), encoding="utf-8")
    if failed:
        return 1
    return 3 if any("TEMP B-TREE" in a for a in alarms) else 0


if __name__ == "__main__":
    sys.exit(main())
