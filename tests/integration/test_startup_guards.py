"""What a daemon that must not start, or must start anyway, leaves alone.

- A second daemon on the socket directory of a live one (with its own state
  directory, or the same one) refuses before it touches anything: not the first
  one's worker sockets, not its leftovers, not a store.  Before 0.6.0 it cleared
  the worker sockets in ``_reconcile`` and only then found the operator socket
  answering, which cut every run in flight off from its agents.
- A ``NOTIFY_SOCKET`` that cannot be used is a warning in the log; the daemon
  serves (before 0.6.0 it stopped at start with a traceback).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import DaemonProcess, new_daemon


@pytest.mark.parametrize("state", ["own", "shared"])
def test_a_second_daemon_on_the_socket_dir_leaves_the_first_ones_runs_alone(
    bench: Bench, state: str
) -> None:
    agent = bench.argv("--wait-for", bench.flag("go"), "--write", "{ticket}.txt=x")
    bench.setup(sloop_toml(agent), {"one": ticket_text("One")})
    bench.start()
    assert bench.daemon is not None
    bench.post("one")
    bench.wait_stage_running("one#1", "implement")
    workers = bench.daemon.socket_dir / "w"
    sockets = sorted(workers.glob("*.sock"))
    assert [p.name for p in sockets] == ["R1.sock"], sockets

    state_dir = bench.root / "other" if state == "own" else bench.state_dir
    second = DaemonProcess(
        repo=bench.repo,
        state_dir=state_dir,
        socket_dir=bench.daemon.socket_dir,
        log_file=bench.root / "second.log",
    )
    code, stdout, log = second.run_to_exit(timeout=20)
    assert code != 0, log
    assert stdout == ""
    assert "Traceback" not in log, log
    if state == "own":
        assert "another daemon already answers on" in log, log
        assert "--socket-dir" in log, log
        assert not (state_dir / "store.sqlite3").exists()  # refused before the store
    else:
        assert "locked by" in log, log

    # The first daemon's run still has its worker socket, and finishes.
    assert sorted(workers.glob("*.sock")) == sockets
    assert bench.daemon.alive()
    bench.release("go")
    run = bench.wait_run("one#1")
    assert run["state"] == "merged", (run, bench.log())


def not_a_socket(root: Path) -> str:
    path = root / "plain-file"
    path.write_text("not a socket\n")
    return str(path)


def stream_socket(root: Path) -> str:
    """A socket of the wrong type (systemd's is a datagram socket)."""
    path = root / "stream.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))  # the file stays; nothing listens: connecting is refused
    return str(path)


@pytest.mark.parametrize(
    "make",
    [
        lambda root: str(root / "missing" / "notify.sock"),
        not_a_socket,
        stream_socket,
        lambda root: "@sloop-test-no-such-abstract-socket-" + os.urandom(4).hex(),
        lambda root: "garbage\x01not a path",
        lambda root: "relative/notify.sock",
        lambda root: "x" * 200,  # longer than a socket address can be
    ],
    ids=["missing", "not-a-socket", "stream-socket", "abstract", "garbage", "relative", "long"],
)
def test_a_bad_notify_socket_is_a_warning_and_the_daemon_serves(
    sandbox: Path, repo: Path, make: object
) -> None:
    assert callable(make)
    value = make(sandbox)
    daemon = new_daemon(sandbox, repo, NOTIFY_SOCKET=value)
    try:
        daemon.start()
        client = daemon.client()
        assert client.ok("show")["kind"] == "dashboard"
        log = daemon.log()
        assert "NOTIFY_SOCKET" in log, log
        assert "WARNING" in log, log
        assert "Traceback" not in log, log
    finally:
        assert daemon.stop() == 0, daemon.log()
    assert "Traceback" not in daemon.log(), daemon.log()
