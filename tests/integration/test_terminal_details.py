"""The terminal's details of issue 26 against a real daemon, sloopctl as a process.

A panel in the follow view shows one row per seat, and the last frame of a
``needs_review`` run the failing seat's reason; stages the run never reached read
``not reached``; each view of a failed run ends with the commands to run next, and
each of those commands works as printed.  ``sloopctl show`` on a 60-column terminal
folds at words, so no ticket name or reason is broken by the terminal's wrap.
Following a name nothing carries is refused in words that say so, and
``sloopctl --version`` names the client.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.support.agents import Bench, install_probe, probe_argv, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_argv, sloopctl_env
from tests.support.terminal import PtyRun, Screen, run_in_pty


def socket_of(bench: Bench) -> Path:
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    return bench.daemon.socket


def sloopctl(bench: Bench, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sloopctl_argv(socket_of(bench), *args),
        capture_output=True,
        text=True,
        env=sloopctl_env(),
        timeout=30,
        check=False,
    )


def on_terminal(bench: Bench, *args: str, columns: int = 100, **kw: Any) -> PtyRun:
    env = sloopctl_env(TERM="xterm", COLUMNS=str(columns))
    return run_in_pty(sloopctl_argv(socket_of(bench), *args), env, columns=columns, **kw)


def screen_of(run: PtyRun, columns: int = 100) -> Screen:
    screen = Screen(columns=columns)
    screen.feed(run.output)
    return screen


def seat(bench: Bench, verdict: str, reason: str, confidence: str) -> list[str]:
    argv = ["verdict", verdict, "--reason", reason, "--confidence", confidence]
    steps = [{"do": "ctl", "key": "verdict", "argv": argv}]
    return probe_argv(bench, bench.flag(f"seat-{verdict}.json"), steps)


def test_a_panels_seats_and_the_failing_seats_reason_end_the_follow_view(bench: Bench) -> None:
    install_probe(bench)
    flow: list[dict[str, Any]] = [
        {
            "name": "implement",
            "action": "agent",
            "command": bench.argv("--say", "writing {attempt}", "--wait-for", bench.flag("go")),
        },
        {
            "name": "review",
            "action": "agent",
            "result_check": "panel",
            "quorum": 2,
            "return_to": "implement",
            "returns": 1,
            "reviewers": [
                {"target": "careful", "command": seat(bench, "pass", "reads well", "high")},
                {"target": "strict", "command": seat(bench, "fail", "missing tests", "low")},
            ],
        },
        {"name": "sync", "action": "sync"},
        {"name": "merge", "action": "ff_only"},
    ]
    bench.setup(
        sloop_toml(bench.argv(), flows={"panel": flow}), {"p": ticket_text("P", flow="panel")}
    )
    bench.start()
    bench.post("p")
    run = bench.wait_stage_running("p#1", "implement")
    done = on_terminal(
        bench,
        "show",
        "p",
        "--follow",
        until=lambda out: b"writing 1" in out,
        then=lambda: bench.release("go"),
    )
    assert done.code == 11, done.output[-3000:]  # needs_review: the return budget is spent
    final = screen_of(done).text()
    rid = run["id"]
    outcome = final.index(next(line for line in final if line.startswith(f"{rid} needs_review")))
    last_frame = final[:outcome]
    review = [i for i, line in enumerate(last_frame) if line.split()[1:2] == ["review#2"]]
    assert review, last_frame
    assert last_frame[review[0] + 1] == "      ✓ seat 0 careful  pass  high  reads well"
    assert last_frame[review[0] + 2] == "      ✗ seat 1 strict  fail  low  missing tests"
    unreached = [
        line.split()[:3] for line in last_frame if line.split()[1:2] in (["sync"], ["merge"])
    ]
    assert unreached == [["-", "sync", "not"], ["-", "merge", "not"]], last_frame
    assert not any("pending" in line for line in last_frame)
    # What to run next, after the outcome; each works as printed.
    after = final[outcome:]
    hints = [line.removeprefix("next: ") for line in after if line.startswith("next: ")]
    assert after[-len(hints) :] == [f"next: {hint}" for hint in hints]  # they end the view
    tid = run["ticket"]
    assert hints == [
        f"sloopctl logs {rid} --stage review#2",
        f"sloopctl show {rid}",
        f"sloopctl diff {rid}",
        f"sloopctl resolve {rid} --merged|--dismissed",  # the one choice left to the reader
        f"sloopctl run {tid}",
    ], final
    logs = sloopctl(bench, *hints[0].split()[1:])
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines, logs.stderr
    assert all(line.startswith("[review#2 ") for line in lines), logs.stdout
    assert "1 of 2 reviewers passed" in logs.stdout
    shown = sloopctl(bench, *hints[1].split()[1:])
    assert shown.returncode == 0, shown.stderr
    assert "missing tests" in shown.stdout
    assert re.search(r"^merge\s+0\s+not reached", shown.stdout, re.MULTILINE), shown.stdout
    assert shown.stdout.rstrip().splitlines()[-4:] == [
        f"next: sloopctl logs {rid} --stage review#2",
        f"next: sloopctl diff {rid}",
        f"next: sloopctl resolve {rid} --merged|--dismissed",
        f"next: sloopctl run {tid}",
    ]
    diff = sloopctl(bench, *hints[2].split()[1:])
    assert diff.returncode == 0, diff.stderr
    # The ways out (issue 33): dismiss the run, then run its ticket again.
    resolve = sloopctl(bench, *hints[3].replace("--merged|", "").split()[1:], "--reason", "moot")
    assert resolve.returncode == 0, resolve.stderr
    assert f"{rid} p#1 resolved: dismissed (by " in resolve.stdout, resolve.stdout
    assert resolve.stdout.rstrip().endswith(f"): moot · {tid} p failed"), resolve.stdout
    resolved = sloopctl(bench, "show", rid)
    assert resolved.stdout.splitlines()[1].startswith("resolved: dismissed (by "), resolved.stdout
    assert "next: sloopctl resolve" not in resolved.stdout
    again = sloopctl(bench, *hints[4].split()[1:])
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"{tid} p "), again.stdout
    assert " · trigger TR" in again.stdout, again.stdout


def test_show_on_a_60_column_terminal_never_breaks_a_word(bench: Bench) -> None:
    names = ["rewrite-the-authentication-middleware-for-sessions", "break-the-build-on-purpose"]
    failing = {"name": "implement", "action": "agent", "command": bench.argv("--exit", "3")}
    bench.setup(
        sloop_toml(bench.argv(), flows={"fails": [failing]}),
        {
            names[0]: ticket_text("Rewrite the middleware"),
            names[1]: ticket_text("Break it", flow="fails"),
        },
    )
    bench.start()
    bench.post(names[0], manual=True)
    bench.post(names[1])
    failed = bench.wait_run(f"{names[1]}#1")
    assert failed["state"] == "failed", failed
    assert len(failed["reason"]) > 40, failed

    piped = sloopctl(bench, "show")
    assert piped.returncode == 0, piped.stderr
    assert any(len(line) > 60 for line in piped.stdout.splitlines())  # a pipe gets them whole
    done = on_terminal(bench, "show", columns=60)
    assert done.code == 0, done.output
    screen = screen_of(done, columns=60)
    shown = screen.text()
    assert screen.wrapped == [], shown  # the terminal never had to wrap a line
    assert all(len(line) <= 60 for line in shown)
    words = " ".join(shown).split()
    # Every word whole: folded, not cut (relative times such as "1s" may tick between
    # the two calls, so they are left out of the comparison).
    assert timeless(piped.stdout.split()) == timeless(words)
    assert names[0] in words  # the held ticket's row
    assert failed["alias"] in words  # the failed run's, among the recent runs
    # The reason goes on, whole, on indented lines under its row (its column starts too
    # far right at 60 columns for a hanging indent there: sloopctl.fold's rule).
    row = next(i for i, line in enumerate(shown) if line.startswith(failed["id"]))
    rest = list(itertools.takewhile(lambda line: line.startswith("  "), shown[row + 1 :]))
    assert rest, shown
    assert failed["reason"] in " ".join(line.strip() for line in [shown[row], *rest])


def test_following_a_ticket_not_posted_yet_is_refused_in_words(bench: Bench) -> None:
    bench.setup(sloop_toml(bench.argv()), {"later": ticket_text("Later")})
    bench.start()
    refused = sloopctl(bench, "show", "later", "--follow")
    assert refused.returncode == 2, refused
    assert refused.stdout == ""
    assert "no ticket or run is called 'later' (yet)" in refused.stderr
    assert "sloopctl post" in refused.stderr
    assert "daemon answered with" not in refused.stderr


def test_version() -> None:
    done = subprocess.run(
        sloopctl_argv(Path("/nonexistent.sock"), "--version"),
        capture_output=True,
        text=True,
        env=sloopctl_env(),
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "sloopctl 0.8.0\n", "")


def timeless(words: list[str]) -> set[str]:
    # "now" turns into "1s ago" between two calls a second apart.
    ticking = r"[(]?(\d+(\.\d+)?(ms|s|m|h|d)|now|ago)[),]*"
    return {word for word in words if not re.fullmatch(ticking, word)}
