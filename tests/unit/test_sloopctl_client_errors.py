"""What sloopctl advises when a connection fails, by how it failed.

Only "no socket" and "connection refused" (nobody listens) advise starting a
daemon.  A daemon that accepted and then reset or closed the connection is
running: the advice is its log.  A full listen backlog (EAGAIN) is retried for
a bounded time, then reported as busy.  Each is simulated with a small socket
server in a thread.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result

from sloopctl import client as client_module
from sloopctl.cli import main
from sloopctl.client import (
    FIX,
    LOG_FIX,
    Client,
    DaemonBusy,
    DaemonHungUp,
    DaemonNotAnswering,
)
from tests.support import client_clock

START_ADVICE = "sloopctl daemon"
CLEAN_ENV: dict[str, str | None] = {
    "SLOOP_OPERATOR_SOCKET": None,
    "SLOOP_SOCKET": None,
    "SLOOP_TOKEN": None,
    "NO_COLOR": "1",
}
OK_LINE = b'{"id": "1", "ok": true, "data": {"kind": "matches", "ref": "x", "tickets": []}}\n'

Handler = Callable[[socket.socket], None]


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Server:
    """A listener whose thread hands each accepted connection to ``handle``."""

    def __init__(self, path: Path, handle: Handler, backlog: int = 8, delay: float = 0) -> None:
        self.path = path
        self.handle = handle
        self.delay = delay
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(backlog)
        self.listener.settimeout(0.05)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        time.sleep(self.delay)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            # One thread each: a queued connection that never sends must not
            # hold up the next one.
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            self.handle(conn)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.listener.close()


@pytest.fixture
def server(sock_dir: Path) -> Iterator[Callable[[Handler], Server]]:
    started: list[Server] = []

    def start(handle: Handler) -> Server:
        srv = Server(sock_dir / f"d{len(started)}.sock", handle)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.close()


def reset_after_request(conn: socket.socket) -> None:
    """Close with the request unread: Linux resets the peer (ECONNRESET) on AF_UNIX."""
    conn.recv(1, socket.MSG_PEEK)  # the request has arrived, and stays unread


def answer_once_then_close(conn: socket.socket) -> None:
    """Answer the first request, then close: the client's next send meets EPIPE."""
    conn.makefile("rb").readline()
    conn.sendall(OK_LINE)


def answer_every_line(conn: socket.socket) -> None:
    for _line in conn.makefile("rb"):
        conn.sendall(OK_LINE)


def sloopctl(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=CLEAN_ENV)


def test_a_reset_connection_says_the_daemon_hung_up(server: Callable[[Handler], Server]) -> None:
    srv = server(reset_after_request)
    with pytest.raises(DaemonHungUp) as caught:
        Client(srv.path).call("show", {"ref": "x"})
    assert "connection reset" in caught.value.message
    assert caught.value.fix == LOG_FIX
    assert START_ADVICE not in caught.value.message


def test_a_broken_pipe_on_a_kept_connection_says_the_daemon_hung_up(
    server: Callable[[Handler], Server],
) -> None:
    srv = server(answer_once_then_close)
    with Client(srv.path) as client:
        assert client.call("show", {"ref": "x"}).ok
        time.sleep(0.1)  # the server has closed its end
        with pytest.raises(DaemonHungUp) as caught:
            client.call("show", {"ref": "x"})
    assert START_ADVICE not in caught.value.message


def test_cli_on_a_reset_exits_4_and_points_at_the_log(server: Callable[[Handler], Server]) -> None:
    srv = server(reset_after_request)
    result = sloopctl("--socket", str(srv.path), "show", "x")
    assert result.exit_code == 4
    assert "hung up" in result.stderr
    assert "daemon.log" in result.stderr
    assert START_ADVICE not in result.stderr
    as_json = sloopctl("--json", "--socket", str(srv.path), "show", "x")
    assert as_json.exit_code == 4
    error = orjson.loads(as_json.stdout)["error"]
    assert error["code"] == "daemon_unavailable"
    assert error["details"]["fix"] == LOG_FIX


def test_only_a_missing_or_refused_socket_advises_starting_one(sock_dir: Path) -> None:
    missing = sloopctl("--socket", str(sock_dir / "none.sock"), "show")
    assert missing.exit_code == 3
    assert START_ADVICE in missing.stderr
    stale = sock_dir / "stale.sock"
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(stale))
    bound.close()  # a socket file nobody listens on
    refused = sloopctl("--socket", str(stale), "show")
    assert refused.exit_code == 4
    assert "connection refused" in refused.stderr
    assert START_ADVICE in refused.stderr
    with pytest.raises(DaemonNotAnswering) as caught:
        Client(stale).call("show")
    assert caught.value.fix == FIX


def fill_backlog(path: Path) -> list[socket.socket]:
    """Connections queued on ``path`` until the next connect would get EAGAIN."""
    queued: list[socket.socket] = []
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(str(path))
        except BlockingIOError:
            sock.close()
            return queued
        queued.append(sock)


def test_a_full_backlog_is_retried_then_reported_busy(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = client_clock.install(monkeypatch)  # what the client waited, not the host's load
    path = sock_dir / "busy.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(0)  # and never accepts
        queued = fill_backlog(path)
        try:
            with pytest.raises(DaemonBusy) as caught:
                Client(path, busy_retry=0.3).call("show")
        finally:
            for sock in queued:
                sock.close()
    assert sum(clock.slept) == pytest.approx(0.3)  # the whole window, and not past it
    assert max(clock.slept) <= client_module.BUSY_BACKOFF_MAX_S
    assert "busy" in caught.value.message
    assert START_ADVICE not in caught.value.message


def test_cli_reports_busy_with_exit_4(sock_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "BUSY_RETRY_S", 0.2)
    path = sock_dir / "busy.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(0)
        queued = fill_backlog(path)
        try:
            result = sloopctl("--socket", str(path), "show")
        finally:
            for sock in queued:
                sock.close()
    assert result.exit_code == 4
    assert "busy" in result.stderr
    assert START_ADVICE not in result.stderr


def test_a_backlog_that_drains_in_time_gets_an_answer(sock_dir: Path) -> None:
    path = sock_dir / "slow.sock"
    srv = Server(path, answer_every_line, backlog=0, delay=0.4)
    queued = fill_backlog(path)
    try:
        started = time.monotonic()
        with Client(path) as client:
            reply = client.call("show", {"ref": "x"})
        waited = time.monotonic() - started
    finally:
        for sock in queued:
            sock.close()
        srv.close()
    assert reply.ok
    assert waited >= 0.2  # it met EAGAIN and waited for the accept loop
