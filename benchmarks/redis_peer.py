"""Redis 7 as the `logs` page's peer: found or installed, started, loaded, asked.

The stream holds the benchmark's records (id ``0-<position>``, one field ``r`` = the
record's stored JSON); these helpers are never timed.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, Sandbox, wait_for_socket
from benchmarks.fixtures import LogStore
from benchmarks.loadgen import decode_resp, resp_command

STREAM = b"log"


def ensure_redis() -> str | None:
    """The redis-server binary, installed through the project's Debian helper if missing."""
    found = shutil.which("redis-server")
    if found is None:
        helper = REPO_ROOT / "scripts" / "ensure-debian-packages"
        subprocess.run([str(helper), "redis-server:redis-server"], check=False)
        found = shutil.which("redis-server")
    return found


class Redis:
    """A blocking RESP connection for loading data and checks (never timed)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(str(path))

    def raw(self, commands: list[bytes]) -> list[bytes]:
        """Send commands pipelined; each whole raw reply, in order."""
        self.sock.sendall(b"".join(commands))
        replies: list[bytes] = []
        buffer, pos = b"", 0
        while len(replies) < len(commands):
            end = _reply_end(buffer, pos)
            if end is None:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise EOFError("redis closed the connection")
                buffer = buffer[pos:] + data
                pos = 0
                continue
            replies.append(buffer[pos:end])
            pos = end
        return replies

    def call(self, *parts: bytes | str | int) -> Any:
        reply = self.raw([resp_command(*parts)])[0]
        return decode_resp(reply)[0]

    def close(self) -> None:
        self.sock.close()


def _reply_end(data: bytes, pos: int) -> int | None:
    """Where the reply starting at ``pos`` ends, or None while it is incomplete."""
    try:
        _, end = decode_resp(data, pos)
    except ValueError:  # a header's CRLF is not there yet
        return None
    return end if end <= len(data) else None


def start_redis(box: Sandbox, binary: str, root: Path) -> tuple[subprocess.Popen[bytes], Path]:
    path = root / "redis.sock"
    argv = [binary, "--port", "0", "--unixsocket", str(path), "--unixsocketperm", "700"]
    argv += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", str(root)]
    argv += ["--logfile", str(root / "redis.log")]
    proc = box.spawn(argv)
    wait_for_socket(path, proc)
    return proc, path


def load_stream(redis: Redis, facts: LogStore) -> None:
    commands = [
        resp_command(b"XADD", STREAM, f"0-{position}", b"r", body)
        for position, body in enumerate(facts.bodies, 1)
    ]
    for first in range(0, len(commands), 1000):
        for reply in redis.raw(commands[first : first + 1000]):
            if reply.startswith(b"-"):
                raise RuntimeError(f"XADD failed: {reply!r}")


def redis_version(redis: Redis) -> str:
    info = redis.call(b"INFO", b"server")
    for line in bytes(info).decode().splitlines():
        if line.startswith("redis_version:"):
            return line.split(":", 1)[1]
    return "unknown"
