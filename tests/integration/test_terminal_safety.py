"""Agents' and tickets' control sequences never reach the operator's terminal.

An agent prints a catalogue of hostile sequences (window title, screen clear,
OSC 52 clipboard write, 8-bit CSI, carriage-return overwrite, bidi override)
on stdout and stderr and leaves a note with them; the ticket's title and body
hold them too.  The real ``sloopctl`` (a subprocess, output captured, so not a
terminal: cleaning does not depend on that) prints none of them by default,
``--raw`` keeps them, and ``--json`` round-trips them exactly.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

import orjson

from tests.support.agents import Bench, printer_argv, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_argv, sloopctl_env

HOSTILE = (
    "title\x1b]0;pwned\x07 clear\x1b[2J clip\x1b]52;c;cm0gLXJmIH4=\x07 "
    "csi8\x9b31m cr-overwrite\rforged bidi\u202egnp.exe esc\x1bc end"
)
FORBIDDEN = frozenset(
    [chr(c) for c in range(0x20) if c not in (0x09, 0x0A)]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)


@dataclass(frozen=True)
class Output:
    stdout: str
    stderr: str


def sloopctl(bench: Bench, *args: str) -> Output:
    """The real CLI; its output decoded without newline translation (\r stays \r)."""
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    done = subprocess.run(
        sloopctl_argv(bench.daemon.socket, *args),
        capture_output=True,
        env=sloopctl_env(),
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return Output(done.stdout.decode(), done.stderr.decode())


def unsafe(text: str) -> set[str]:
    return {f"U+{ord(c):04X}" for c in FORBIDDEN & set(text)}


def test_hostile_text_is_cleaned_kept_with_raw_and_exact_in_json(bench: Bench) -> None:
    agent = printer_argv(
        bench,
        [
            {"do": "bytes", "hex": (HOSTILE + "\n").encode().hex()},
            {"do": "bytes", "stream": "stderr", "hex": (HOSTILE + "\n").encode().hex()},
            {"do": "note", "text": HOSTILE},
        ],
    )
    flows = {"default": [{"name": "implement", "action": "agent", "command": agent}]}
    title = "Evil\x1b]0;owned\x07 \u202eeltit"
    body = "first\x1b[2J line\n\x1b]52;c;ZXZpbA==\x07second line"
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"evil": ticket_text(title, body)})
    bench.start()
    bench.post("evil")
    run = bench.wait_run("evil#1")
    run_id = run["id"]

    # JSON round-trips what the agent printed, exactly.
    records: list[dict[str, Any]] = []
    for line in sloopctl(bench, "--json", "logs", run_id).stdout.splitlines():
        records += orjson.loads(line)["data"]["records"]
    texts = {(r["stream"], r["text"]) for r in records}
    assert {("stdout", HOSTILE), ("stderr", HOSTILE), ("note", HOSTILE)} <= texts, texts
    ticket = orjson.loads(sloopctl(bench, "--json", "show", "evil").stdout)["data"]["value"]
    assert ticket["title"] == title, ticket
    assert body in ticket["body"], ticket

    # By default: nothing a terminal would act on, from logs, show or events.
    logs = sloopctl(bench, "logs", run_id)
    assert unsafe(logs.stdout + logs.stderr) == set()
    assert "cr-overwrite\N{REPLACEMENT CHARACTER}forged" in logs.stdout  # visible, not hidden
    assert "title clear clip csi8" in logs.stdout  # sequences removed whole
    for args in (("show", "evil"), ("show", run_id), ("show",), ("events",)):
        shown = sloopctl(bench, *args)
        assert unsafe(shown.stdout + shown.stderr) == set(), args
    assert "Evil" in sloopctl(bench, "show", "evil").stdout

    # --raw keeps the bytes as stored.
    raw = sloopctl(bench, "logs", run_id, "--raw").stdout
    assert HOSTILE in raw
    assert title in sloopctl(bench, "--raw", "show", "evil").stdout
