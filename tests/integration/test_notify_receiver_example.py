"""The receiver docs/operator-guide.md shows, run as written, against a real daemon.

The exact code block under "A receiver that checks the signature" is written to a
file and started; the daemon's signed deliveries are accepted (and printed), while
a forged signature, a body changed after signing and a replayed old timestamp
are refused with 401.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import REPO_ROOT, free_loopback_port, wait_until

GUIDE = REPO_ROOT / "docs" / "operator-guide.md"
HEADING = "### A receiver that checks the signature"
SECRET = "correct horse battery staple"


def documented_receiver() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    after = text[text.index(HEADING) :]
    start = after.index("```python\n") + len("```python\n")
    return after[start : after.index("```", start)]


def accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.fixture
def documented(sandbox: Path) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    script = sandbox / "receiver.py"
    script.write_text(documented_receiver(), encoding="utf-8")
    port = free_loopback_port()
    env = {**os.environ, "SLOOP_NOTIFY_SECRET": SECRET, "PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        wait_until(lambda: accepting(port) or process.poll() is not None)
        assert process.poll() is None, "the documented receiver did not start"
        yield port, process
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def post(port: int, body: bytes, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", "/", body=body, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def signed(body: bytes, timestamp: int, secret: str = SECRET) -> dict[str, str]:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return {"X-Sloop-Timestamp": str(timestamp), "X-Sloop-Signature": "sha256=" + mac.hexdigest()}


def test_the_documented_receiver_accepts_the_daemons_bodies_and_nothing_forged(
    bench: Bench, documented: tuple[int, subprocess.Popen[str]]
) -> None:
    port, receiver = documented
    table = (
        "[[notify]]\n"
        f'url = "http://127.0.0.1:{port}/"\n'
        'on = ["merged", "failed", "needs_review", "aborted", "gate_changed"]\n'
        'secret_env = "SLOOP_NOTIFY_SECRET"\n'
    )
    bench.setup(
        sloop_toml(bench.argv("--write", "a.txt=x"), extra=table), {"one": ticket_text("One")}
    )
    bench.env["SLOOP_NOTIFY_SECRET"] = SECRET
    bench.start()
    bench.post("one")
    run = bench.wait_run("one#1")
    bench.ok("pause", {"reason": "freeze"})
    assert receiver.stdout is not None
    printed = [receiver.stdout.readline().strip() for _ in range(2)]
    assert printed == [
        f"merged {run['alias']} ({run['id']}) merged",
        "gate_changed gate open -> paused: freeze",
    ]

    def delivered() -> list[dict[str, object]]:
        page = bench.ok("events", {})
        return [e for e in page["events"] if e["kind"] == "notify_delivered"]

    events = wait_until(lambda: len(found := delivered()) == 2 and found)
    assert [e["data"]["status"] for e in events] == [204, 204]

    body = b'{"on": "merged", "text": "forged"}'
    now = int(time.time())
    assert post(port, body, signed(body, now)) == 204  # the check itself
    assert post(port, body, signed(body, now, "a guessed secret")) == 401
    assert post(port, body + b" ", signed(body, now)) == 401  # changed after signing
    assert post(port, body, signed(body, now - 3600)) == 401  # replayed an hour later
    assert post(port, body, {}) == 401  # unsigned
    assert receiver.stdout.readline().strip() == "merged forged"
