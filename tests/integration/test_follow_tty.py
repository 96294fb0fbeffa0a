"""``sloopctl show REF --follow`` on a terminal: a real daemon, sloopctl under a pseudo-terminal.

The frame is redrawn in place (cursor up, never a new screen), shows each stage
with its state and the running stage's last lines, fits the terminal's width, and
ends with the final frame and the outcome line; the exit codes are the CI gate's.
An agent's escape sequences never reach the terminal, not even with ``--raw``.
The non-terminal path is tests/integration/test_follow_cli.py's, unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_argv, sloopctl_env
from tests.support.terminal import PtyRun, Screen, run_in_pty


def socket_of(bench: Bench) -> Path:
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    return bench.daemon.socket


def follow(
    bench: Bench,
    *args: str,
    colour: bool = False,
    columns: int = 100,
    until: Callable[[bytes], bool] | None = None,
    then: Callable[[], None] | None = None,
) -> PtyRun:
    env = sloopctl_env(TERM="xterm")
    if colour:
        env.pop("NO_COLOR")
    argv = sloopctl_argv(socket_of(bench), *args)
    return run_in_pty(argv, env, columns=columns, until=until, then=then)


def screen_of(run: PtyRun, columns: int = 100) -> Screen:
    screen = Screen(columns=columns)
    screen.feed(run.output)
    return screen


def agent_stage(bench: Bench, *options: str) -> dict[str, object]:
    return {"name": "implement", "action": "agent", "command": bench.argv(*options)}


def test_the_stage_table_is_redrawn_in_place_until_the_run_merges(bench: Bench) -> None:
    talk = bench.argv(
        "--say", "reading the code", "--say", "line two of the work", "--wait-for",
        bench.flag("go"), "--write", "{ticket}.txt=done",
    )  # fmt: skip
    bench.setup(sloop_toml(talk), {"talk": ticket_text("Talk")})
    bench.start()
    bench.post("talk")
    run = bench.wait_stage_running("talk#1", "implement")

    # The running stage's last lines show up while it runs; then it is let go.
    done = follow(
        bench,
        "show",
        "talk",
        "--follow",
        until=lambda out: b"line two of the work" in out,
        then=lambda: bench.release("go"),
    )
    assert done.code == 0, done.output[-3000:]
    screen = screen_of(done)
    assert screen.ups > 0  # redrawn in place, not scrolled
    final = screen.text()
    assert final[0].startswith(f"talk#1  {run['id']}  merged")
    stages = [line.split() for line in final[1:4]]
    assert [s[:3] for s in stages] == [
        ["✓", "implement#1", "passed"],
        ["✓", "sync#1", "passed"],
        ["✓", "merge#1", "passed"],
    ]
    assert all(s[3].endswith("s") for s in stages)  # each with its duration
    assert final[-1] == f"{run['id']} merged"
    assert not any("running" in line or "pending" in line for line in final)
    assert "line two of the work" not in "\n".join(final)  # a merged run's table is clean
    assert b"\x1b[3" not in done.output  # NO_COLOR: no colour, cursor moves all the same
    assert b"\x1b[?25l" in done.output
    assert done.output.rstrip().endswith(f"{run['id']} merged".encode())

    # --quiet is unchanged on a terminal: nothing but the exit code.
    quiet = follow(bench, "show", run["id"], "--follow", "--quiet")
    assert (quiet.code, quiet.output) == (0, b"")


def test_a_failed_run_keeps_its_last_lines_in_colour_and_within_the_width(bench: Bench) -> None:
    failing = agent_stage(
        bench, "--say", "about to fail " + "x" * 80, "--wait-for", bench.flag("go"), "--exit", "3"
    )
    bench.setup(sloop_toml(bench.argv(), flows={"default": [failing]}), {"bad": ticket_text("Bad")})
    bench.start()
    bench.post("bad")
    bench.wait_stage_running("bad#1", "implement")
    done = follow(
        bench,
        "show",
        "bad",
        "--follow",
        colour=True,
        columns=40,
        until=lambda out: b"about to fail" in out,
        then=lambda: bench.release("go"),
    )
    assert done.code == 10, done.output[-3000:]
    assert b"\x1b[31m" in done.output  # failed, in red
    screen = screen_of(done, columns=40)
    final = screen.text()
    outcome = next(i for i, line in enumerate(final) if line.startswith("R1 failed: "))
    assert all(row >= outcome for row in screen.wrapped)  # no line of the frame wrapped
    assert len("".join(final[outcome:])) > 40  # the outcome itself is never cut
    assert final[0].startswith("bad#1  R1  failed")
    assert final[1].split()[:3] == ["✗", "implement#1", "failed"]
    assert final[1].endswith("…")
    assert any(line.startswith("    about to fail xxx") and line.endswith("…") for line in final)


def test_an_agents_escape_sequences_never_reach_the_terminal(bench: Bench) -> None:
    hostile = agent_stage(
        bench,
        "--say", "\x1b]0;pwned\x07title set",
        "--say", "\x1b[2J\x1b[Hscreen cleared",
        "--say", "\x1b]52;c;ZXZpbA==\x07clipboard",
        "--wait-for", bench.flag("go-{run}"), "--exit", "1",
    )  # fmt: skip
    tickets = {"evil": ticket_text("Evil"), "worse": ticket_text("Worse")}
    bench.setup(sloop_toml(bench.argv(), flows={"default": [hostile]}, parallel=2), tickets)
    bench.start()
    for name, raw in (("evil", ()), ("worse", ("--raw",))):
        bench.post(name)
        run = bench.wait_stage_running(f"{name}#1", "implement")
        release = functools.partial(bench.release, f"go-{run['id']}")
        done = follow(
            bench,
            *raw,
            "show",
            f"{name}#1",
            "--follow",
            until=lambda out: b"clipboard" in out,
            then=release,
        )
        assert done.code == 10
        for sequence in (b"\x1b]", b"\x1b[2J", b"\x1b[H", b"\x07"):
            assert sequence not in done.output, (raw, sequence)
        shown = "\n".join(screen_of(done).text())  # Screen refuses any other sequence too
        assert "title set" in shown
        assert "screen cleared" in shown
        assert "clipboard" in shown
