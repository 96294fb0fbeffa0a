"""The CI gate and the feed commands through the real CLI and the real daemon.

``sloopctl show REF --follow --quiet`` exits 0 only for ``merged``, and 10,
11, 12 for failed, needs_review and aborted (docs/cli.md "Exit codes"); 3 when
there is no daemon.  Each ``sloopctl`` here is a process of its own, as CI
runs it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_argv, sloopctl_env, sloopctl_start


def socket_of(bench: Bench) -> Path:
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    return bench.daemon.socket


def sloopctl(socket_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sloopctl_argv(socket_path, *args),
        capture_output=True,
        text=True,
        env=sloopctl_env(),
        timeout=30,
        check=False,
    )


def finish(process: subprocess.Popen[str], timeout: float = 30.0) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"sloopctl did not finish: {out}\n{err}") from None
    return process.returncode, out, err


def next_line(process: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The process's next line of standard output, without its newline."""
    assert process.stdout is not None
    stdout = process.stdout
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert got, f"no line from sloopctl within {timeout} s"
    assert got[0], "sloopctl closed its output"
    return got[0].rstrip("\n")


def agent(bench: Bench, *options: str) -> dict[str, Any]:
    return {"name": "implement", "action": "agent", "command": bench.argv(*options)}


def test_show_follow_exit_codes_for_each_terminal_state(bench: Bench) -> None:
    flows = {
        "failing": [agent(bench, "--say", "about to fail", "--exit", "1")],
        "review": [agent(bench, "--say", "done, no merge stage")],
        "stuck": [agent(bench, "--wait-for", bench.flag("never"))],
    }
    # The default flow: implement (commits a file) → sync → merge.
    config = sloop_toml(bench.argv("--write", "{ticket}.txt=made"), flows=flows, parallel=4)
    bench.setup(
        config,
        {
            "good": ticket_text("Good"),
            "bad": ticket_text("Bad", flow="failing"),
            "review": ticket_text("Review", flow="review"),
            "stuck": ticket_text("Stuck", flow="stuck"),
        },
    )
    bench.start()
    sock = socket_of(bench)
    for name in ("good", "bad", "review", "stuck"):
        bench.post(name, manual=True)  # registered, no run yet

    # Ticket references: each follower waits for the ticket's run to be claimed.
    good = sloopctl_start(sock, "show", "good", "--follow", "--quiet")
    bad = sloopctl_start(sock, "--json", "show", "bad", "--follow")
    review = sloopctl_start(sock, "show", "review", "--follow")
    # The first thing each says is that there is no run yet (nothing is queued).
    assert review.stderr is not None
    assert bad.stdout is not None
    waiting = review.stderr.readline()
    assert waiting.startswith("T3 waiting for a run: no_trigger"), waiting
    first_envelope = bad.stdout.readline()
    assert good.poll() is None
    assert bad.poll() is None
    assert review.poll() is None
    for name in ("good", "bad", "review", "stuck"):
        bench.ok("run", {"ref": name})

    code, out, err = finish(good)
    assert (code, out, err) == (0, "", "")
    merged = bench.wait_run("good#1")
    assert merged["state"] == "merged"

    code, out, err = finish(bad)
    assert code == 10, err
    envelopes = [json.loads(line) for line in [first_envelope, *out.splitlines()]]
    assert envelopes[0]["data"]["kind"] == "ticket"
    assert envelopes[0]["data"]["value"]["runs"] == []
    last = envelopes[-1]["data"]
    assert last["kind"] == "run"
    assert last["value"]["state"] == "failed"
    assert last["value"]["terminal"] is True
    assert all(not e["data"].get("value", {}).get("terminal") for e in envelopes[:-1])

    code, out, err = finish(review)
    run = bench.wait_run("review#1")
    assert code == 11, err
    assert out == f"{run['id']} needs_review: {run['reason']}\n"
    # Why there is no run yet (each time that changes), then the run's transitions; the
    # run may have settled before the first look at it.
    lines = err.splitlines()
    waits = [line for line in lines if line.startswith("T3 waiting for a run: ")]
    changes = [line for line in lines[len(waits) :] if not line.startswith("next: ")]
    assert f"{run['id']} implement#1 passed" in changes
    assert changes[-1] == f"{run['id']} needs_review"
    # Then what to run next (issue 26), last on stderr.
    assert lines[-1].startswith("next: sloopctl "), lines

    # A run reference, aborted from here while its agent waits.
    stuck = bench.wait_stage_running("stuck#1", "implement")
    follower = sloopctl_start(sock, "show", "stuck#1", "--follow", "--quiet")
    time.sleep(0.4)
    assert follower.poll() is None
    bench.ok("abort", {"run": stuck["id"]})
    assert finish(follower) == (12, "", "")

    # A settled run answers at once, with the same codes.
    for ref, expected in (("good#1", 0), ("bad#1", 10), ("review#1", 11), (stuck["id"], 12)):
        done = sloopctl(sock, "show", ref, "--follow", "--quiet")
        assert (done.returncode, done.stdout, done.stderr) == (expected, "", ""), ref
    done = sloopctl(sock, "show", "good#1", "--follow")
    assert done.returncode == 0
    assert done.stdout == f"{merged['id']} merged\n"

    # Not a run or a ticket: a usage error; --quiet alone too.
    assert sloopctl(sock, "show", "project:default", "--follow", "--quiet").returncode == 2
    assert sloopctl(sock, "show", "no-such-ticket", "--follow", "--quiet").returncode == 2
    assert sloopctl(sock, "show", "good", "--quiet").returncode == 2


def test_show_follow_without_a_daemon_exits_3(sandbox: Path) -> None:
    missing = sandbox / "none.sock"
    # A follower that waited for a daemon would run into the helper's 30 s timeout; a
    # tighter bound would time Python's start-up on a busy host, not sloopctl.
    done = sloopctl(missing, "show", "R1", "--follow", "--quiet")
    assert done.returncode == 3
    assert done.stdout == ""
    assert "daemon_unavailable" in done.stderr


def test_logs_events_pause_resume_commands(bench: Bench) -> None:
    lines = [f"line {n}" for n in range(1, 131)]
    bench.setup(
        sloop_toml(bench.argv(), flows={"default": [agent(bench, *[f"--say={t}" for t in lines])]}),
        {"talk": ticket_text("Talk")},
    )
    bench.start()
    sock = socket_of(bench)
    bench.post("talk")
    run = bench.wait_run("talk#1")

    # logs pages until complete: more than one page of 100.
    done = sloopctl(sock, "logs", run["alias"])
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert [p for p in printed if "stdout]" in p] == [f"[implement#1 stdout] {t}" for t in lines]
    assert printed[0] == "[implement#1 system] stage 'implement' execution 1 started"
    assert printed[-1].startswith("[implement#1 system] run settled needs_review")
    assert done.stderr == ""

    tail = sloopctl(sock, "logs", run["id"], "--tail", "3", "--stage", "implement")
    assert tail.returncode == 0
    assert tail.stdout.splitlines() == printed[-3:]
    assert tail.stderr == f"… {len(printed) - 3} earlier records elided\n"

    as_json = sloopctl(sock, "--json", "logs", run["id"])
    pages = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert len(pages) == 2
    assert [p["data"]["complete"] for p in pages] == [False, True]
    assert sum(len(p["data"]["records"]) for p in pages) == len(printed)

    bad = sloopctl(sock, "logs", run["id"], "--stage", "implement#0")
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: invalid_arguments: ")
    missing = sloopctl(sock, "--json", "logs", "R99")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error"]["code"] == "not_found"

    # pause and resume print the gate; events show them unscoped only.
    paused = sloopctl(sock, "pause", "--reason", "release freeze")
    assert (paused.returncode, paused.stdout) == (0, "gate paused (release freeze)\n")
    resumed = sloopctl(sock, "resume")
    assert (resumed.returncode, resumed.stdout) == (0, "gate open\n")

    feed = sloopctl(sock, "events")
    assert feed.returncode == 0, feed.stderr
    kinds = [line.split()[2] for line in feed.stdout.splitlines()]
    assert kinds == [
        "daemon_started",
        "run_claimed",
        "run_started",
        "run_finished",
        "gate_changed",
        "gate_changed",
    ]
    finished = feed.stdout.splitlines()[3].split()
    assert finished[3:5] == [run["ticket"], run["id"]]
    assert "state=needs_review" in finished
    scoped = sloopctl(sock, "events", "--scope", "talk")
    assert [line.split()[2] for line in scoped.stdout.splitlines()] == kinds[1:4]
    newest = sloopctl(sock, "--json", "events", "--tail", "1")
    envelopes = [json.loads(line) for line in newest.stdout.splitlines()]
    assert len(envelopes) == 1
    assert envelopes[0]["data"]["events"][0]["kind"] == "gate_changed"
    invalid = sloopctl(sock, "events", "--scope", "(")
    assert invalid.returncode == 1
    assert "invalid_arguments" in invalid.stderr

    # events --follow polls until interrupted; a new event shows up while it polls.
    # Each step waits for the follower's line, not for a guess at how long its start
    # takes (0.5 s was too short on a busy host: it started after the pause).
    follower = sloopctl_start(sock, "events", "--follow", "--tail", "1")
    last_before = next_line(follower)
    bench.ok("pause", {"reason": "while following"})
    fresh = next_line(follower)
    follower.send_signal(signal.SIGINT)  # Ctrl-C
    code, out, err = finish(follower, 10)
    assert code == 130, err
    followed = [last_before, fresh, *out.splitlines()]
    assert len(followed) == 2
    assert all(" gate_changed " in line for line in followed)
    assert followed[-1].endswith('from=open state=paused reason="while following"')
