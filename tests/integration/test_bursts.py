"""A burst of clients against the real daemon: every one is answered.

The operator socket listens with a backlog of ``LISTEN_BACKLOG`` (asyncio's
default of 100 turned 290 of 400 simultaneous connects away with EAGAIN), and
``sloopctl`` retries a connect that still meets a full backlog, so a CI fleet
polling one daemon sees answers, not "not accepting connections".
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from pathlib import Path

import orjson

from sloopctl.client import Client, ClientError, Reply
from sloopd.wire.connection import LISTEN_BACKLOG
from tests.support.daemon import DaemonProcess

BURST = 400
THREADS = 150


def somaxconn() -> int:
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


def test_four_hundred_simultaneous_connects_are_all_answered(daemon: DaemonProcess) -> None:
    assert daemon.socket is not None
    assert min(LISTEN_BACKLOG, somaxconn()) >= BURST, "the kernel caps the backlog lower"
    socks: list[socket.socket] = []
    refused = 0
    try:
        # Connect all of them before reading anything: the daemon's loop sees
        # them queued at once, as a fleet of CI jobs starting together does.
        for _ in range(BURST):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.connect(str(daemon.socket))
            except BlockingIOError:
                refused += 1
                sock.close()
                continue
            socks.append(sock)
        assert refused == 0, f"{refused} of {BURST} connects met a full backlog"
        for n, sock in enumerate(socks):
            request = {"v": 1, "id": f"b{n}", "verb": "show", "args": {}, "token": None}
            sock.sendall(orjson.dumps(request) + b"\n")
        replies = read_one_line_each(socks, timeout=60.0)
    finally:
        for sock in socks:
            sock.close()
    assert len(replies) == BURST
    for n, line in replies.items():
        envelope = orjson.loads(line)
        assert envelope["id"] == f"b{n}", envelope
        assert envelope["ok"] is True, envelope
        assert envelope["data"]["kind"] == "dashboard"
    assert daemon.alive(), daemon.log()


def read_one_line_each(socks: list[socket.socket], timeout: float) -> dict[int, bytes]:
    """The first line each socket receives, by index; fails if one is closed first."""
    selector = selectors.DefaultSelector()
    buffers = {n: b"" for n in range(len(socks))}
    for n, sock in enumerate(socks):
        selector.register(sock, selectors.EVENT_READ, n)
    done: dict[int, bytes] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(socks):
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(done)} of {len(socks)} answered in {timeout} s"
        for key, _ in selector.select(left):
            n = key.data
            chunk = key.fileobj.recv(65536)  # type: ignore[union-attr]
            assert chunk, f"connection {n} closed before its reply"
            buffers[n] += chunk
            if b"\n" in buffers[n]:
                done[n] = buffers[n].partition(b"\n")[0]
                selector.unregister(key.fileobj)
    selector.close()
    return done


def test_a_hundred_and_fifty_concurrent_clients_all_succeed(daemon: DaemonProcess) -> None:
    """sloopctl's own client, in threads released together, each asking for ``status``."""
    assert daemon.socket is not None
    path = daemon.socket
    start = threading.Barrier(THREADS)
    results: list[Reply | ClientError] = []
    lock = threading.Lock()

    def one() -> None:
        start.wait()
        try:
            with Client(path, read_timeout=60.0) as client:
                outcome: Reply | ClientError = client.call("status")
        except ClientError as exc:
            outcome = exc
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=one) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    failures = [r.message for r in results if isinstance(r, ClientError)]
    assert failures == []
    assert len(results) == THREADS
    assert all(isinstance(r, Reply) and r.ok for r in results)
