"""A tool whose caller is cancelled while it starts is killed and collected, whatever
becomes of the caller's loop.

Tools start in a thread of their own (``sloopd.util.subproc._STARTER``).  A caller
cancelled as its loop closes (the end of ``asyncio.run``, a daemon stopping) used to
hear of the start only through the loop; with the loop closed nobody did, and the tool
ran on with its pipes open and unwaited (seen as a ``subprocess … is still running``
warning in whichever test ran next).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
from typing import Any

import pytest

from sloopd.util import subproc


def test_a_tool_started_as_its_loop_closes_is_killed_and_collected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    started: list[subprocess.Popen[bytes]] = []
    real = subprocess.Popen

    def slow_start(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        release.wait(10)  # the start outlives its caller's loop
        popen: subprocess.Popen[bytes] = real(*args, **kwargs)
        started.append(popen)
        return popen

    monkeypatch.setattr(subprocess, "Popen", slow_start)  # the module subproc starts with

    async def caller() -> None:
        asyncio.get_running_loop().create_task(subproc.run(["sleep", "30"], timeout=60))
        await asyncio.sleep(0.05)  # the tool is starting; asyncio.run cancels it and closes

    asyncio.run(caller())
    release.set()
    subproc._STARTER.submit(lambda: None).result(10)  # the start, then what it queued
    deadline = time.monotonic() + 10
    while started and started[0].returncode is None and time.monotonic() < deadline:
        subproc._STARTER.submit(lambda: None).result(10)
        time.sleep(0.01)
    assert len(started) == 1
    popen = started[0]
    assert popen.returncode == -signal.SIGKILL  # killed, and waited for
    for pipe in (popen.stdout, popen.stderr):
        assert pipe is not None
        assert pipe.closed
