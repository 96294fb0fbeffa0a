"""Worker sockets against adversarial script agents (protocol "Two sockets").

A run's agent reaches Sloop only through ``SLOOP_SOCKET`` with ``SLOOP_TOKEN``;
the probing agent of ``tests.support.agents`` tries everything it should not be
able to do and records the answers in the sandbox, and the test checks that
each attempt got the one ``unauthorized`` (same code, same message) and that
nothing stored changed.  The same flows check what the worker may do: ``brief``,
``show`` of its own run and ticket, ``note`` and its one ``verdict``.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sloopd.wire import api
from tests.support.agents import (
    Bench,
    install_probe,
    probe_argv,
    read_json,
    sloop_toml,
    stage_table,
    ticket_text,
)
from tests.support.daemon import Client, wait_until

UNAUTHORIZED = {"code": "unauthorized", "message": "not authorized", "details": {}}
REFUSED_PEER = "this connection comes from inside a run"
BRIEF_KEYS = frozenset({"run", "ticket", "worktree", "branch", "stage", "definition_of_done"})
BRIEF_TICKET_KEYS = frozenset(
    {"id", "name", "title", "path", "project", "flow", "priority", "state", "body"}
    | {"body_bytes", "body_clipped"}  # 0.8.0: the body is bounded (MAX_SHOWN_BODY_BYTES)
)

# Every operator verb, with arguments that would be valid on the operator socket.
OPERATOR_REQUESTS: dict[str, dict[str, Any]] = {
    "post": {"path": "tickets/other.md"},
    "run": {"ref": "other"},
    "hold": {"ref": "other"},
    "ready": {"ref": "other"},
    "abort": {"run": "{run}"},
    "logs": {"run": "{run}"},
    "events": {},
    "status": {},
    "list": {},
    "wait": {"run": "{run}", "timeout_ms": 0},
    "gc": {},
    "pause": {"reason": "probe"},
    "resume": {},
}

# References a worker may not show: another ticket (id, name, path), a pattern,
# a project (its own included), runs and tickets that do not exist.
FOREIGN_REFS = {
    "other_id": "T1",
    "other_name": "other",
    "other_path": "tickets/other.md",
    "pattern": "oth.*",
    "pattern_own": "pro.*",
    "project_other": "project:side",
    "project_own": "project:default",
    "unknown_ticket": "T99",
    "unknown_run": "R99",
    "unknown_name": "nothing-here",
}


@pytest.fixture
def bench(bench: Bench) -> Bench:
    """The shared bench, with the probe agent installed."""
    install_probe(bench)
    return bench


def req(key: str, verb: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A probe step: one raw NDJSON request (own socket and token unless ``extra`` says)."""
    return {"do": "req", "key": key, "verb": verb, "args": args or {}, **extra}


def ctl(key: str, *argv: str) -> dict[str, Any]:
    """A probe step: ``sloopctl --json ARGV`` inside the run."""
    return {"do": "ctl", "key": key, "argv": list(argv)}


def error_of(answer: dict[str, Any]) -> dict[str, Any]:
    assert set(answer) == {"id", "ok", "error"}, answer
    assert answer["ok"] is False, answer
    error: dict[str, Any] = answer["error"]
    return error


def data_of(answer: dict[str, Any]) -> Any:
    assert answer.get("ok") is True, answer
    return answer["data"]


def assert_unauthorized(answer: dict[str, Any]) -> None:
    assert error_of(answer) == UNAUTHORIZED, answer


def assert_refused_peer(answer: dict[str, Any]) -> None:
    error = error_of(answer)
    assert error["code"] == "unauthorized", answer
    assert error["message"].startswith(REFUSED_PEER), answer


def connect_error(path: Path) -> str | None:
    """The error connecting to ``path`` raises (its class name), None if it connects."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError as exc:
            return exc.__class__.__name__
    return None


def others(dashboard: dict[str, Any], mine: str) -> list[dict[str, Any]]:
    return [t for t in dashboard["tickets"] if t["name"] != mine]


def work_steps(bench: Bench) -> list[dict[str, Any]]:
    """The reported stage's probe: scope, verbs, tokens, its verdict, the operator socket."""
    operator = str(bench.root / "s" / api.OPERATOR_SOCKET_NAME)
    steps: list[dict[str, Any]] = [
        {"do": "env", "key": "env"},
        ctl("brief", "brief"),
        req("show_none", "show"),
        req("show_run", "show", {"ref": "{run}"}),
        req("show_alias", "show", {"ref": "probe#1"}),
        req("show_ticket_id", "show", {"ref": "{ticket}"}),
        req("show_ticket_name", "show", {"ref": "probe"}),
        req("show_ticket_path", "show", {"ref": "tickets/probe.md"}),
        req("show_limit", "show", {"limit": 5}),
        # 0.7.0: an epoch no write will reach soon: held for its wait_ms, then answered.
        req("show_held", "show", {"since": 2**52, "wait_ms": 200}),
        ctl("ctl_show", "show"),
    ]
    steps += [req(f"foreign_{key}", "show", {"ref": ref}) for key, ref in FOREIGN_REFS.items()]
    steps += [req(f"op_{verb}", verb, args) for verb, args in OPERATOR_REQUESTS.items()]
    steps += [
        # Tokens: wrong, null, absent; and a wrong token learns nothing about arguments.
        req("token_wrong", "brief", token="lit:not-the-token"),
        req("token_empty", "brief", token="lit:"),
        req("token_null", "brief", token=None),
        req("token_absent", "brief", omit_token=True),
        req("token_wrong_bad_args", "verdict", {"verdict": "maybe"}, token="lit:nope"),
        req("token_null_op_verb", "run", {"ref": "other"}, token=None),
        ctl("note", "note", "looking around"),
        req("confidence_float", "verdict", {"verdict": "pass", "confidence": 0.9}),
        req("confidence_word", "verdict", {"verdict": "pass", "confidence": "certain"}),
        req("verdict_word", "verdict", {"verdict": "maybe"}),
        ctl("verdict", "verdict", "pass", "--reason", "all good", "--confidence", "high"),
        req("verdict_again", "verdict", {"verdict": "fail", "reason": "changed my mind"}),
        ctl("ctl_verdict_again", "verdict", "fail"),
        req("note_after_verdict", "note", {"text": "still here"}),
        # The operator socket, reached directly: by the agent, by sloopctl, by an orphan.
        req("operator_show", "show", token=None, socket="file:" + bench.flag("operator")),
        req(
            "operator_post",
            "post",
            {"path": "tickets/other.md"},
            token=None,
            socket="file:" + bench.flag("operator"),
        ),
        req("operator_with_token", "show", socket="file:" + bench.flag("operator")),
        ctl("operator_ctl", "--socket", operator, "show"),
        ctl("operator_ctl_hold", "--socket", operator, "hold", "other"),
        {
            "do": "grandchild",
            "key": "grandchild",
            "socket": "file:" + bench.flag("operator"),
            "out": bench.flag("grandchild.json"),
        },
        {"do": "save", "what": "token", "path": bench.flag("token-work")},
        {"do": "touch", "path": bench.flag("parked")},
        {"do": "wait", "path": bench.flag("release")},
    ]
    return steps


def check_steps(bench: Bench) -> list[dict[str, Any]]:
    """The exit_code stage's probe: no verdict here, and the earlier stage's token is dead."""
    return [
        req("brief", "brief"),
        req("verdict", "verdict", {"verdict": "pass"}),
        req("verdict_reason", "verdict", {"verdict": "fail", "reason": "x", "confidence": "low"}),
        req("stale_brief", "brief", token="file:" + bench.flag("token-work")),
        req(
            "stale_note",
            "note",
            {"text": "from the past"},
            token="file:" + bench.flag("token-work"),
        ),
        req(
            "stale_verdict",
            "verdict",
            {"verdict": "pass"},
            token="file:" + bench.flag("token-work"),
        ),
        req("note", "note", {"text": "checked"}),
    ]


def test_a_worker_reaches_only_its_own_run(bench: Bench) -> None:
    work = probe_argv(bench, bench.flag("work.json"), work_steps(bench))
    check = probe_argv(bench, bench.flag("check.json"), check_steps(bench))
    flows = {
        "probe": [
            {"name": "work", "action": "agent", "result_check": "reported", "command": work},
            {"name": "check", "action": "command", "command": check},
        ]
    }
    # Unsandboxed, so the operator socket is in reach: this is the peer check, the
    # defence in depth behind the sandbox (test_attacks.py tries the same sandboxed).
    bench.setup(
        sloop_toml(bench.argv(), flows=flows, sandbox="none"),
        {
            "other": ticket_text("Other work", "Not yours.", project="side"),
            "bystander": ticket_text("Bystander", "Nor this."),
            "probe": ticket_text("Probe", "Poke at everything.", flow="probe", priority=3),
        },
    )
    bench.start()
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    operator = bench.daemon.socket
    assert operator == bench.root / "s" / api.OPERATOR_SOCKET_NAME
    bench.path("operator").write_text(str(operator))
    assert bench.post("other", hold=True)["ticket"]["id"] == "T1"
    assert bench.post("bystander", manual=True)["ticket"]["id"] == "T2"
    before = bench.dashboard()
    events_before = bench.ok("events")["events"]
    assert bench.post("probe")["ticket"]["id"] == "T3"

    # Parked at the end of its stage: the socket is there, private, and the token is live.
    wait_until(lambda: bench.path("parked").exists(), timeout=40)
    work_seen = read_json(bench.path("work.json"))
    env = work_seen["env"]
    worker_socket = bench.root / "s" / "w" / "R1.sock"
    assert env["SLOOP_SOCKET"] == str(worker_socket)
    assert env["socket_mode"] == "0o600"
    assert env["socket_is_socket"] is True
    assert "SLOOP_OPERATOR_SOCKET" not in env
    assert "SLOOP_SOCKET_DIR" not in env
    mode = os.stat(worker_socket).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(worker_socket.parent).st_mode) == 0o700
    token = bench.path("token-work").read_text().strip()
    assert token == env["SLOOP_TOKEN"]
    assert len(token) >= 32

    # The live worker token on the operator socket, from the test (not a run child).
    for verb, args in (
        ("show", {}),
        ("hold", {"ref": "other"}),
        ("brief", {}),
        ("note", {"text": "x"}),
    ):
        error = bench.client.error(verb, args, token=token)
        assert error["code"] == "unauthorized", (verb, error)
        assert "worker tokens" in error["message"], (verb, error)
    held = Client(worker_socket)  # stays open across the run's end
    try:
        live = held.call("brief", token=token)
        assert live["ok"] is True, live
        assert live["data"]["run"] == "R1", live
        # Nothing the probe tried moved operator-owned state.
        during = bench.dashboard()
        assert others(during, "probe") == others(before, "probe")
        assert during["queued_triggers"] == []
        assert during["gate"] == before["gate"]
        assert [r["id"] for r in during["runs"]] == ["R1"]
        assert during["runs"][0]["state"] == "running"
        parked = bench.show_run("R1")
        assert parked is not None
        assert stage_table(parked) == [("work", 1, "running"), ("check", 0, "pending")]

        bench.release("release")
        run = bench.wait_run("R1")
        # After the run settled: its socket is gone, and an open connection is closed
        # (or, if it were still answered, refused).
        wait_until(lambda: not worker_socket.exists(), timeout=5)
        assert connect_error(worker_socket) in ("FileNotFoundError", "ConnectionRefusedError")
        try:
            after = held.call("brief", token=token)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            pass
        else:
            assert error_of(after) == UNAUTHORIZED, after
    finally:
        held.close()

    check_seen = read_json(bench.path("check.json"))
    assert_work(bench, work_seen, run)
    assert_check(check_seen, work_seen)
    assert_run(bench, run)
    after_dashboard = bench.dashboard()
    assert others(after_dashboard, "probe") == others(before, "probe")
    assert after_dashboard["queued_triggers"] == []
    assert after_dashboard["gate"] == before["gate"]
    assert bench.ticket("other")["state"] == "held"
    assert bench.ticket("other")["runs"] == []
    events = bench.ok("events")["events"]
    assert events[: len(events_before)] == events_before
    assert [(e["kind"], e["run"]) for e in events[len(events_before) :]] == [
        ("run_claimed", "R1"),
        ("run_started", "R1"),
        ("run_finished", "R1"),
    ]


def assert_work(bench: Bench, seen: dict[str, Any], run: dict[str, Any]) -> None:
    # brief through sloopctl: the caller's own stage execution, no acceptance.
    brief = seen["brief"]
    assert brief["rc"] == 0, brief
    data = data_of(brief["json"])
    assert set(data) == BRIEF_KEYS, data
    assert set(data["ticket"]) == BRIEF_TICKET_KEYS, data["ticket"]
    assert data["run"] == "R1"
    assert data["branch"] == "sloop/probe/1"
    assert data["worktree"] == str(bench.worktree_of("R1"))
    assert data["ticket"]["id"] == "T3"
    assert data["ticket"]["name"] == "probe"
    assert data["ticket"]["title"] == "Probe"
    assert data["ticket"]["flow"] == "probe"
    assert data["ticket"]["priority"] == 3
    assert data["ticket"]["state"] == "running"
    assert "Poke at everything." in data["ticket"]["body"]
    assert data["stage"] == {"name": "work", "attempt": 1, "result_check": "reported"}
    done = data["definition_of_done"]
    assert isinstance(done, list)
    assert done
    assert all(isinstance(line, str) for line in done)

    # show: its own run and ticket, by every exact reference to them.
    for key in ("show_none", "show_limit", "show_run", "show_alias", "show_held"):
        shown = data_of(seen[key])
        assert shown["kind"] == "run", (key, shown)
        assert shown["value"]["id"] == "R1", (key, shown)
        assert shown["value"]["stages"][0]["state"] == "running"
        assert isinstance(shown["epoch"], int), (key, shown)
        assert shown["epoch"] < 2**52, (key, shown)
    for key in ("show_ticket_id", "show_ticket_name", "show_ticket_path"):
        shown = data_of(seen[key])
        assert shown["kind"] == "ticket", (key, shown)
        assert shown["value"]["id"] == "T3", (key, shown)
    ctl_show = seen["ctl_show"]
    assert ctl_show["rc"] == 0, ctl_show
    assert data_of(ctl_show["json"])["kind"] == "run", ctl_show
    for key in FOREIGN_REFS:
        assert_unauthorized(seen[f"foreign_{key}"])

    # Operator verbs, and every wrong token: the same unauthorized.
    for verb in OPERATOR_REQUESTS:
        assert_unauthorized(seen[f"op_{verb}"])
    for key in (
        "token_wrong",
        "token_empty",
        "token_null",
        "token_absent",
        "token_wrong_bad_args",
        "token_null_op_verb",
    ):
        assert_unauthorized(seen[key])

    # note, then the one verdict; bad confidences are invalid_arguments.
    note = seen["note"]
    assert note["rc"] == 0, note
    assert data_of(note["json"])["note"]["text"] == "looking around"
    assert set(data_of(note["json"])["note"]) == {"run", "stage", "attempt", "text", "at_ms"}
    for key in ("confidence_float", "confidence_word", "verdict_word"):
        assert error_of(seen[key])["code"] == "invalid_arguments", seen[key]
    verdict = seen["verdict"]
    assert verdict["rc"] == 0, verdict
    assert data_of(verdict["json"]) == {
        "verdict": {
            "run": "R1",
            "stage": "work",
            "attempt": 1,
            "verdict": "pass",
            "confidence": "high",
            "reason": "all good",
        }
    }
    assert error_of(seen["verdict_again"])["code"] == "conflict"
    again = seen["ctl_verdict_again"]
    assert again["rc"] != 0, again
    assert error_of(again["json"])["code"] == "conflict", again
    assert data_of(seen["note_after_verdict"])["note"]["text"] == "still here"

    # The operator socket refuses the run's processes, whatever they send.
    for key in ("operator_show", "operator_post", "operator_with_token"):
        assert_refused_peer(seen[key])
    for key in ("operator_ctl", "operator_ctl_hold"):
        refused = seen[key]
        assert refused["rc"] != 0, refused
        assert error_of(refused["json"])["code"] == "unauthorized", refused
    orphan = seen["grandchild"]
    assert bench.daemon is not None
    assert bench.daemon.proc is not None
    assert orphan["ppid"] == bench.daemon.proc.pid, orphan  # adopted by the subreaper
    assert orphan["sid"] != seen["env"]["pid"], orphan  # its own session, not the agent's
    assert not [name for name in orphan["env"] if name.startswith("SLOOP")], orphan
    assert_refused_peer(orphan["answer"])


def assert_check(seen: dict[str, Any], work_seen: dict[str, Any]) -> None:
    brief = data_of(seen["brief"])
    assert brief["stage"] == {"name": "check", "attempt": 1, "result_check": "exit_code"}
    work_brief = data_of(work_seen["brief"]["json"])
    assert brief["definition_of_done"] != work_brief["definition_of_done"]
    assert {k: v for k, v in brief.items() if k not in ("stage", "definition_of_done")} == {
        k: v for k, v in work_brief.items() if k not in ("stage", "definition_of_done")
    }
    for key in ("verdict", "verdict_reason", "stale_brief", "stale_note", "stale_verdict"):
        assert_unauthorized(seen[key])
    assert data_of(seen["note"])["note"]["stage"] == "check"


def assert_run(bench: Bench, run: dict[str, Any]) -> None:
    # A flow without a merge stage walked to its end.
    assert run["state"] == "needs_review", run
    assert run["halt"] is None, run
    assert stage_table(run) == [("work", 1, "passed"), ("check", 1, "passed")]
    work, check = run["stages"]
    assert work["verdict_source"] == "reported"
    assert work["confidence"] == "high"
    assert work["reason"] == "all good"
    assert work["reviewers"] == []
    assert check["verdict_source"] == "exit_code"
    assert check["exit_code"] == 0
    assert check["confidence"] is None
    notes = [(n["stage"], n["attempt"], n["text"]) for n in run["notes"]]
    assert notes == [
        ("work", 1, "looking around"),
        ("work", 1, "still here"),
        ("check", 1, "checked"),
    ]
    logs = bench.ok("logs", {"run": "R1"})
    noted = [
        (r["stage"], r["attempt"], r["text"]) for r in logs["records"] if r["stream"] == "note"
    ]
    assert noted == notes
    for record in logs["records"]:
        assert set(record) == {"cursor", "ts_ms", "stage", "attempt", "stream", "text"}
    # No token ever reaches the log.
    work_token = bench.path("token-work").read_text().strip()
    assert not [r for r in logs["records"] if work_token in r["text"]]
    assert work_token not in bench.log()


def test_a_process_carrying_the_child_marker_is_refused(bench: Bench) -> None:
    """Not a descendant of the daemon, but it carries a run child's marker variable."""
    bench.setup(sloop_toml(bench.argv()))
    bench.start()
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    code = (
        "import json, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
        's.sendall(b\'{"v":1,"id":"m","verb":"show","args":{}}\\n\')\n'
        "print(s.makefile().readline())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(bench.daemon.socket)],
        env={**os.environ, "SLOOP_CHILD_MARKER": "made-up"},
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    assert_refused_peer(json.loads(done.stdout))
    # Without the marker the same program is an operator client.
    plain = subprocess.run(
        [sys.executable, "-c", code, str(bench.daemon.socket)],
        env={k: v for k, v in os.environ.items() if k != "SLOOP_CHILD_MARKER"},
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    assert data_of(json.loads(plain.stdout))["kind"] == "dashboard"


def swap_steps(bench: Bench) -> list[dict[str, Any]]:
    """Each of two parallel runs tries the other's live token on its own socket."""
    tokens, sockets, done = bench.flag("tokens"), bench.flag("sockets"), bench.flag("done")
    other = "other:" + tokens
    return [
        {"do": "save", "what": "token", "path": tokens + "/{run}"},
        req("cross_brief", "brief", token=other),
        req("cross_show", "show", token=other),
        req("cross_note", "note", {"text": "not mine"}, token=other),
        req("cross_verdict", "verdict", {"verdict": "fail", "reason": "sabotage"}, token=other),
        req("own_token_elsewhere", "brief", socket="other:" + sockets),
        # Both runs stay in their stage until both tried: every token used was live.
        {"do": "touch", "path": done + "/{run}"},
        {"do": "wait", "dir": done, "count": 2},
        req("own_brief", "brief"),
        req("verdict", "verdict", {"verdict": "pass"}),
    ]


def test_another_runs_token_is_refused(bench: Bench) -> None:
    swap = probe_argv(bench, bench.flag("swap-{run}.json"), swap_steps(bench))
    # Where each run's socket lives on the host: a sandboxed run cannot even see the other's.
    bench.path("sockets").mkdir()
    for run_id in ("R1", "R2"):
        bench.path("sockets").joinpath(run_id).write_text(
            str(bench.root / "s" / "w" / f"{run_id}.sock")
        )
    flows = {
        "swap": [{"name": "work", "action": "agent", "result_check": "reported", "command": swap}]
    }
    bench.setup(
        sloop_toml(bench.argv(), parallel=2, flows=flows),
        {"left": ticket_text("Left", flow="swap"), "right": ticket_text("Right", flow="swap")},
    )
    bench.start()
    bench.post("left")
    bench.post("right")
    runs = {name: bench.wait_run(f"{name}#1") for name in ("left", "right")}
    tokens = {n: bench.path("tokens").joinpath(n).read_text() for n in ("R1", "R2")}
    assert tokens["R1"] != tokens["R2"]

    for name, run in runs.items():
        seen = read_json(bench.path(f"swap-{run['id']}.json"))
        for key in ("cross_brief", "cross_show", "cross_note", "cross_verdict"):
            assert_unauthorized(seen[key])
        assert seen["own_token_elsewhere"] == {"connect_error": "FileNotFoundError"}
        assert data_of(seen["own_brief"])["run"] == run["id"]
        assert data_of(seen["verdict"])["verdict"]["run"] == run["id"]
        # The other run's token reported nothing here: the own verdict was the first.
        assert run["state"] == "needs_review", (name, run)
        assert stage_table(run) == [("work", 1, "passed")]
        work = run["stages"][0]
        assert work["verdict_source"] == "reported"
        assert work["reason"] is None
        assert work["confidence"] == "medium"
        assert run["notes"] == []
    assert bench.dashboard()["queued_triggers"] == []


def test_an_unknown_verb_is_unauthorized_too(bench: Bench) -> None:
    operator = "file:" + bench.flag("operator")
    steps = [
        req("worker", "frobnicate"),
        req("worker_tokenless", "frobnicate", token=None),
        req("operator", "frobnicate", token=None, socket=operator),
    ]
    probe = probe_argv(bench, bench.flag("unknown.json"), steps)
    flows = {"default": [{"name": "work", "action": "agent"}]}
    bench.setup(sloop_toml(probe, flows=flows, sandbox="none"))  # the operator socket in reach
    bench.start()
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    bench.path("operator").write_text(str(bench.daemon.socket))
    bench.setup(None, {"one": ticket_text("One")})
    bench.post("one")
    run = bench.wait_run("one#1")
    assert stage_table(run) == [("work", 1, "passed")], run
    seen = read_json(bench.path("unknown.json"))
    assert_refused_peer(seen["operator"])
    assert_unauthorized(seen["worker"])
    assert_unauthorized(seen["worker_tokenless"])


def test_a_vanished_peer_from_inside_a_run_is_refused(bench: Bench) -> None:
    # The probe keeps the daemon busy with its own worker requests, so the connecting
    # child is reaped before the daemon looks at the peer (nearly every try, measured).
    race = {
        "do": "race",
        "key": "race",
        "socket": "file:" + bench.flag("operator"),
        "tries": 50,
        "busy": 100,
    }
    probe = probe_argv(bench, bench.flag("race.json"), [race])
    flows = {"default": [{"name": "work", "action": "agent"}]}
    bench.setup(sloop_toml(probe, flows=flows, sandbox="none"))  # the operator socket in reach
    bench.start()
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    bench.path("operator").write_text(str(bench.daemon.socket))
    bench.setup(None, {"one": ticket_text("One")})
    bench.post("one")
    run = bench.wait_run("one#1")
    assert stage_table(run) == [("work", 1, "passed")], run
    seen = read_json(bench.path("race.json"))["race"]
    # Only harmless `show` was sent; an admitted one answers with the operator dashboard.
    assert seen["admitted"] is None, seen
    assert set(seen["counts"]) == {"unauthorized"}, seen


def test_a_run_continued_after_a_crash_gets_a_new_socket_and_settles_without_one(
    bench: Bench,
) -> None:
    bench.setup(sloop_toml(bench.argv("--hang")), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    bench.wait_stage_running("R1", "implement")
    worker_socket = bench.root / "s" / "w" / "R1.sock"
    assert worker_socket.exists()
    assert bench.daemon is not None
    bench.daemon.kill9()
    bench.start()
    # The run continues (issue 38): the killed daemon's socket is replaced by a live one.
    wait_until(
        lambda: any(
            r["stage"] == "implement" and r["attempt"] == 2 and r["state"] == "running"
            for r in (bench.show_run("R1") or {"stages": []})["stages"]
        ),
        timeout=30,
    )
    assert connect_error(worker_socket) is None
    bench.ok("abort", {"run": "R1"})
    run = bench.wait_run("R1")
    assert run["state"] == "aborted", run
    # Settled: nothing listens there, and nothing should be left there either.
    assert connect_error(worker_socket) in ("FileNotFoundError", "ConnectionRefusedError")
    assert not worker_socket.exists()
