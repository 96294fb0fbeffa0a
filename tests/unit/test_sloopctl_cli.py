"""sloopctl against a fake daemon: requests sent, exit codes, --json output.

The fake speaks just enough NDJSON to answer; the real daemon is covered by the
integration tests.  Socket paths live in short /tmp directories because Unix
socket paths must stay under 108 bytes.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pytest
from click.testing import CliRunner, Result

from sloopctl import client as client_module
from sloopctl.cli import main
from sloopctl.client import Client, DaemonNotAnswering
from tests.support import client_clock as client_clock_module
from tests.support.client_clock import ClientClock

ROOT = Path(__file__).resolve().parents[2]
Answer = Callable[[dict[str, Any]], dict[str, Any] | bytes | None]
Envelope = Callable[[dict[str, Any]], dict[str, Any]]
# Keep the developer's environment out of the tests.
CLEAN_ENV: dict[str, str | None] = {
    "SLOOP_OPERATOR_SOCKET": None,
    "SLOOP_SOCKET": None,
    "SLOOP_TOKEN": None,
    "NO_COLOR": "1",
}


def ok(data: Any) -> Envelope:
    return lambda request: {"id": request["id"], "ok": True, "data": data}


def refuse(code: str, message: str = "no") -> Envelope:
    return lambda request: {
        "id": request["id"],
        "ok": False,
        "error": {"code": code, "message": message, "details": {}},
    }


class FakeDaemon:
    """A socket server in a thread: records requests and answers each line.

    An answer of bytes is sent as is (to test unreadable replies); None hangs
    up without replying.
    """

    def __init__(self, path: Path, answer: Answer) -> None:
        self.path = path
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(8)
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            with conn, conn.makefile("rb") as lines:
                self._answer_lines(conn, lines)

    def _answer_lines(self, conn: socket.socket, lines: BinaryIO) -> None:
        for line in lines:
            request = orjson.loads(line)
            self.requests.append(request)
            reply = self.answer(request)
            if reply is None:
                return
            try:
                conn.sendall(reply if isinstance(reply, bytes) else orjson.dumps(reply) + b"\n")
            except BrokenPipeError:  # the client gave up waiting: fine
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._listener.close()


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def serve(sock_dir: Path) -> Iterator[Callable[[Answer], FakeDaemon]]:
    daemons: list[FakeDaemon] = []

    def start(answer: Answer) -> FakeDaemon:
        daemon = FakeDaemon(sock_dir / f"d{len(daemons)}.sock", answer)
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        daemon.close()


def sloopctl(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={**CLEAN_ENV, **(env or {})})


@pytest.fixture
def client_clock(monkeypatch: pytest.MonkeyPatch) -> ClientClock:
    return client_clock_module.install(monkeypatch)


def test_missing_socket_exits_3_without_waiting(sock_dir: Path, client_clock: ClientClock) -> None:
    result = sloopctl("--socket", str(sock_dir / "none.sock"), "show")
    assert client_clock.slept == []  # no retry, no wait: it fails within a second
    assert result.exit_code == 3
    assert "daemon_unavailable" in result.stderr
    assert "sloopctl daemon" in result.stderr
    assert "none.sock" in result.stderr
    assert result.stdout == ""


def test_socket_without_listener_exits_4(sock_dir: Path, client_clock: ClientClock) -> None:
    stale = sock_dir / "stale.sock"
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(stale))
    bound.close()  # the file stays, nobody listens: what a crashed daemon leaves
    result = sloopctl("--socket", str(stale), "show")
    assert client_clock.slept == []  # refused is final: not retried
    assert result.exit_code == 4
    assert "daemon_unavailable" in result.stderr
    assert "refused" in result.stderr


def test_full_backlog_exits_4_once_the_busy_retry_runs_out(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch, client_clock: ClientClock
) -> None:
    monkeypatch.setattr("sloopctl.client.BUSY_RETRY_S", 0.3)
    path = sock_dir / "busy.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(0)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as first:
            first.connect(str(path))
            result = sloopctl("--socket", str(path), "show")
    # Retried for the whole window and not past it, in steps no longer than the cap.
    assert sum(client_clock.slept) == pytest.approx(0.3)
    assert len(client_clock.slept) > 1
    assert max(client_clock.slept) <= client_module.BUSY_BACKOFF_MAX_S
    assert result.exit_code == 4
    assert "busy" in result.stderr
    assert "sloopctl daemon" not in result.stderr


def test_hang_up_before_reply_exits_4(serve: Callable[[Answer], FakeDaemon]) -> None:
    daemon = serve(lambda request: None)
    result = sloopctl("--socket", str(daemon.path), "show")
    assert result.exit_code == 4
    assert "closed before a reply" in result.stderr
    assert "sloopctl daemon" not in result.stderr  # it is running: see its log


def test_json_prints_the_synthetic_envelope_when_unavailable(sock_dir: Path) -> None:
    path = sock_dir / "none.sock"
    result = sloopctl("--json", "--socket", str(path), "show")
    assert result.exit_code == 3
    envelope = orjson.loads(result.stdout)
    assert envelope["id"] is None
    assert envelope["ok"] is False
    assert envelope["error"]["code"] == "daemon_unavailable"
    assert envelope["error"]["details"]["socket"] == str(path)
    assert "sloopctl daemon" in envelope["error"]["details"]["fix"]
    assert result.stdout.count("\n") == 1


def test_json_prints_the_reply_verbatim(serve: Callable[[Answer], FakeDaemon]) -> None:
    line = b'{"id": "1",  "ok": true, "data": {"kind": "matches", "ref": "x", "tickets": []}}'
    daemon = serve(lambda request: line + b"\n")
    result = sloopctl("show", "x", "--json", "--socket", str(daemon.path))
    assert result.exit_code == 0
    assert result.stdout_bytes == line + b"\n"
    assert daemon.requests == [
        {"v": 1, "id": "1", "verb": "show", "args": {"ref": "x"}, "token": None}
    ]


def test_daemon_error_exits_1(serve: Callable[[Answer], FakeDaemon]) -> None:
    daemon = serve(refuse("not_found", "no ticket or run matches 'T9'"))
    result = sloopctl("--socket", str(daemon.path), "hold", "T9")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: not_found: no ticket or run matches 'T9'"
    json_result = sloopctl("--json", "--socket", str(daemon.path), "hold", "T9")
    assert json_result.exit_code == 1
    assert orjson.loads(json_result.stdout)["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "answer",
    [
        refuse("unsupported_version", "protocol version 1 is not supported"),
        lambda request: b"HTTP/1.1 400 Bad Request\n",
        lambda request: b'{"id": "1", "data": {}}\n',
        lambda request: b'{"id": "other", "ok": true, "data": {}}\n',
    ],
)
def test_version_mismatch_or_unreadable_reply_exits_5(
    serve: Callable[[Answer], FakeDaemon], answer: Answer
) -> None:
    daemon = serve(answer)
    result = sloopctl("--socket", str(daemon.path), "show")
    assert result.exit_code == 5, result.stderr
    assert result.stderr.startswith("error: unsupported_version: ")
    json_result = sloopctl("--json", "--socket", str(daemon.path), "show")
    assert json_result.exit_code == 5
    assert orjson.loads(json_result.stdout)["ok"] is False


def test_requests_carry_the_documented_args(
    serve: Callable[[Answer], FakeDaemon], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticket = {"id": "T3", "name": "fix-login", "state": "ready"}
    daemon = serve(ok({"ticket": ticket, "created": True, "trigger": None}))
    sock = str(daemon.path)
    monkeypatch.chdir(tmp_path)
    before = int(time.time() * 1000)
    assert sloopctl("--socket", sock, "post", "a.md", "sub/b.md", "--manual").exit_code == 0
    assert sloopctl("--socket", sock, "post", "a.md", "--hold", "--at", "10m").exit_code == 0
    assert sloopctl("--socket", sock, "run", "T3", "--at", "2026-12-01T09:00Z").exit_code == 0
    for verb in ("hold", "ready"):
        assert sloopctl("--socket", sock, verb, "fix-login").exit_code == 0
    assert sloopctl("--socket", sock, "abort", "R2").exit_code == 0
    assert sloopctl("--socket", sock, "show", "T3", "--limit", "5").exit_code == 0
    here = os.path.realpath(tmp_path)
    args = [(r["verb"], r["args"]) for r in daemon.requests]
    assert args[0] == ("post", {"path": f"{here}/a.md", "manual": True})
    assert args[1] == ("post", {"path": f"{here}/sub/b.md", "manual": True})
    verb, held = args[2]
    at_ms = held.pop("trigger")["at_ms"]
    assert held == {"path": f"{here}/a.md", "hold": True}
    assert before + 600_000 <= at_ms <= int(time.time() * 1000) + 600_000
    assert args[3:] == [
        ("run", {"ref": "T3", "trigger": {"at_ms": 1_796_115_600_000}}),
        ("hold", {"ref": "fix-login"}),
        ("ready", {"ref": "fix-login"}),
        ("abort", {"run": "R2"}),
        ("show", {"ref": "T3", "limit": 5}),
    ]
    assert all(r["token"] is None and r["v"] == 1 for r in daemon.requests)


def test_post_reports_each_file_and_exits_1_if_any_failed(
    serve: Callable[[Answer], FakeDaemon],
) -> None:
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if request["args"]["path"].endswith("missing.md"):
            return refuse("not_found", "no such file")(request)
        return ok({"ticket": {"id": "T1", "name": "a", "state": "ready"}, "created": False})(
            request
        )

    daemon = serve(answer)
    result = sloopctl("--json", "--socket", str(daemon.path), "post", "a.md", "missing.md", "b.md")
    assert result.exit_code == 1
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [line["ok"] for line in lines] == [True, False, True]


@pytest.mark.parametrize(
    "args",
    [
        ["run", "T1", "--at", "tomorrow"],
        ["post", "a.md", "--at", "2026-12-01T09:00"],
        ["show", "--limit", "0"],
        ["verdict", "maybe"],
        ["post"],
    ],
)
def test_usage_errors_exit_2(args: list[str], sock_dir: Path) -> None:
    result = sloopctl("--socket", str(sock_dir / "none.sock"), *args)
    assert result.exit_code == 2, result.output


def test_worker_verbs_need_the_run_environment(sock_dir: Path) -> None:
    result = sloopctl("--socket", str(sock_dir / "x.sock"), "brief")
    assert result.exit_code == 2
    assert "SLOOP_SOCKET" in result.stderr
    assert "SLOOP_TOKEN" in result.stderr


def test_inside_a_run_worker_verbs_and_show_use_the_worker_socket(
    serve: Callable[[Answer], FakeDaemon],
) -> None:
    worker = serve(ok({"verdict": {"run": "R1", "stage": "review", "verdict": "pass"}}))
    env: dict[str, str | None] = {"SLOOP_SOCKET": str(worker.path), "SLOOP_TOKEN": "tok-1"}
    assert (
        sloopctl("verdict", "pass", "--reason", "ok", "--confidence", "high", env=env).exit_code
        == 0
    )
    assert sloopctl("note", "halfway", env=env).exit_code == 0
    assert sloopctl("brief", env=env).exit_code == 0
    assert sloopctl("show", env=env).exit_code == 0
    sent = [(r["verb"], r["args"], r["token"]) for r in worker.requests]
    assert sent == [
        ("verdict", {"verdict": "pass", "reason": "ok", "confidence": "high"}, "tok-1"),
        ("note", {"text": "halfway"}, "tok-1"),
        ("brief", {}, "tok-1"),
        ("show", {}, "tok-1"),
    ]


def test_deprecated_aliases_are_hidden_but_work(serve: Callable[[Answer], FakeDaemon]) -> None:
    listing = sloopctl("--help").stdout
    assert "status" not in listing
    assert "wait" not in listing
    assert " list " not in listing
    for name in ("status", "list", "wait"):
        assert "deprecated: use show" in sloopctl(name, "--help").stdout
    daemon = serve(ok({"tickets": []}))
    result = sloopctl("--socket", str(daemon.path), "wait", "R1", "--timeout-ms", "5")
    assert result.exit_code == 0
    assert "deprecated" in result.stderr
    assert daemon.requests[0]["args"] == {"run": "R1", "timeout_ms": 5}


def test_help_documents_every_exit_code() -> None:
    text = sloopctl("--help").stdout
    for code in ("0", "1", "2", "3", "4", "5", "10", "11", "12"):
        assert re.search(rf"^ +{code}  \w", text, re.M), code


def test_python_m_sloopctl_in_a_real_process(sock_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "sloopctl", "--json", "--socket", str(sock_dir / "n.sock"), "show"],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert orjson.loads(done.stdout)["error"]["code"] == "daemon_unavailable"


def test_client_keeps_one_connection_for_several_calls(
    serve: Callable[[Answer], FakeDaemon],
) -> None:
    daemon = serve(ok({"events": [], "next_cursor": "c1"}))
    with Client(daemon.path) as client:
        replies = [client.call("events", {"tail": 1}) for _ in range(3)]
    assert [r.data["next_cursor"] for r in replies] == ["c1"] * 3
    assert [r["id"] for r in daemon.requests] == ["1", "2", "3"]


def test_client_read_timeout_is_the_callers_choice(serve: Callable[[Answer], FakeDaemon]) -> None:
    def slow(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.5)
        return ok({})(request)

    daemon = serve(slow)
    with pytest.raises(DaemonNotAnswering, match="no reply in time"):
        Client(daemon.path, read_timeout=0.1).call("show")


def test_daemon_command_finds_a_running_daemon(serve: Callable[[Answer], FakeDaemon]) -> None:
    daemon = serve(ok({"kind": "dashboard"}))
    result = sloopctl("--socket", str(daemon.path), "daemon")
    assert result.exit_code == 0
    assert result.stdout == f"{daemon.path}\n"


@pytest.mark.parametrize(
    "args",
    [
        ["logs", "R1"],
        ["events"],
        ["run", "T1"],
        ["abort", "R1"],
        ["diff", "R1"],
        ["daemon"],
        ["doctor"],
    ],
)
def test_inside_a_run_an_operator_verb_says_the_worker_socket_does_not_serve_it(
    args: list[str], serve: Callable[[Answer], FakeDaemon]
) -> None:
    """Issue 33: inside a sandbox `sloopctl logs` answered daemon_unavailable with
    "start it with 'sloopctl daemon'", wrong advice for an agent."""
    worker = serve(ok({}))
    env: dict[str, str | None] = {"SLOOP_SOCKET": str(worker.path), "SLOOP_TOKEN": "tok-1"}
    result = sloopctl(*args, env=env)
    assert result.exit_code == 2, result.output
    assert (
        "the worker socket serves brief, show, note and verdict; "
        f"'{args[0]}' is an operator verb" in result.stderr
    )
    assert "sloopctl daemon" not in result.stderr
    assert "start" not in result.stderr
    assert worker.requests == []  # nothing sent anywhere


def test_inside_a_run_a_missing_worker_socket_never_says_start_a_daemon(sock_dir: Path) -> None:
    env: dict[str, str | None] = {"SLOOP_SOCKET": str(sock_dir / "gone.sock"), "SLOOP_TOKEN": "t"}
    result = sloopctl("brief", env=env)
    assert result.exit_code == 3, result.output
    assert "no socket at" in result.stderr
    assert "sloopctl daemon" not in result.stderr
    assert "stage execution ends" in result.stderr
    as_json = sloopctl("--json", "show", env=env)
    assert as_json.exit_code == 3
    assert "sloopctl daemon" not in as_json.stdout


def resolved_reply(resolution: str, state: str) -> dict[str, Any]:
    return {
        "run": {
            "id": "R7",
            "alias": "fix-login#1",
            "ticket": "T3",
            "state": "needs_review",
            "terminal": True,
            "resolution": {
                "resolution": resolution,
                "by": "alice",
                "reason": "landed with #42",
                "at_ms": 1_800_000_000_000,
                "auto": False,
            },
        },
        "ticket": {"id": "T3", "name": "fix-login", "state": state},
    }


def test_resolve_sends_one_call_with_the_local_user_and_says_what_became_of_it(
    serve: Callable[[Answer], FakeDaemon],
) -> None:
    """Issue 33: a needs_review run had no way out but running it again."""
    daemon = serve(ok(resolved_reply("merged", "merged")))
    sock = str(daemon.path)
    env: dict[str, str | None] = {"LOGNAME": "alice"}
    result = sloopctl("--socket", sock, "resolve", "R7", "--merged", "--reason", "x", env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "R7 fix-login#1 resolved: merged by hand (by alice): landed with #42 · T3 fix-login merged"
    )
    assert (
        sloopctl("--socket", sock, "resolve", "fix-login#1", "--dismissed", env=env).exit_code == 0
    )
    assert [(r["verb"], r["args"]) for r in daemon.requests] == [
        ("resolve", {"run": "R7", "resolution": "merged", "reason": "x", "by": "alice"}),
        ("resolve", {"run": "fix-login#1", "resolution": "dismissed", "by": "alice"}),
    ]
    as_json = sloopctl("--json", "--socket", sock, "resolve", "R7", "--dismissed", env=env)
    assert orjson.loads(as_json.stdout)["data"]["run"]["resolution"]["resolution"] == "merged"


@pytest.mark.parametrize("flags", [[], ["--merged", "--dismissed"]])
def test_resolve_needs_exactly_one_way_out(flags: list[str], sock_dir: Path) -> None:
    result = sloopctl("--socket", str(sock_dir / "none.sock"), "resolve", "R7", *flags)
    assert result.exit_code == 2
    assert "give one of --merged or --dismissed" in result.stderr


def test_resolve_refused_by_the_daemon_exits_1(serve: Callable[[Answer], FakeDaemon]) -> None:
    daemon = serve(refuse("conflict", "run R7 is merged, not needs_review"))
    result = sloopctl("--socket", str(daemon.path), "resolve", "R7", "--dismissed")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: conflict: run R7 is merged, not needs_review"
