"""The one pipe reader and exit watch of tools and children (``sloopd.util.pipes``).

Each test runs on both loops the daemon's code meets: asyncio's own (the tests') and
uvloop (the daemon's), whose ``add_reader`` is its own implementation.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import pytest
import uvloop

from sloopd.util.pipes import ExitWatch, PipeReader

T = TypeVar("T")
Runner = Callable[[Coroutine[Any, Any, T]], T]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner[Any]:
    return asyncio.run if request.param == "asyncio" else uvloop.run


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@contextmanager
def no_fd_leak() -> Iterator[None]:
    """Every descriptor opened inside is closed by its end.  Used inside the loop: a
    loop's own descriptors (uvloop keeps some from its first start on) are no leak."""
    before = open_fds()
    yield
    assert open_fds() - before == set()


async def leak_free(work: Coroutine[Any, Any, None]) -> None:
    with no_fd_leak():
        await work


class Stream:
    """What a reader delivered, and when its end came."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.ends = 0
        self.ended = asyncio.Event()

    def chunk(self, data: bytes) -> None:
        self.chunks.append(data)

    def end(self) -> None:
        self.ends += 1
        self.ended.set()


def pipe_pair() -> tuple[Any, int]:
    """A pipe's read end as a file object (what ``Popen`` hands out) and its write end."""
    read_fd, write_fd = os.pipe()
    return os.fdopen(read_fd, "rb", buffering=0), write_fd


def test_the_end_of_a_pipe_is_reported_once_and_closes_it(run: Runner[None]) -> None:
    async def body() -> None:
        pipe, write_fd = pipe_pair()
        stream = Stream()
        reader = PipeReader(pipe, 1024, stream.chunk, stream.end)
        assert not os.get_blocking(pipe.fileno())  # a wake with nothing never blocks the loop
        os.write(write_fd, b"hello\n")
        os.close(write_fd)
        await asyncio.wait_for(stream.ended.wait(), 10)
        assert b"".join(stream.chunks) == b"hello\n"
        assert reader.ended
        assert pipe.closed
        reader.resume()  # nothing to read on: a closed pipe is never watched again
        reader.close()  # idempotent
        await asyncio.sleep(0.05)
        assert stream.ends == 1

    run(leak_free(body()))


def test_a_stream_is_read_in_chunks_of_at_most_the_size(run: Runner[None]) -> None:
    whole = bytes(range(256)) * 40  # 10 KiB, more than one chunk and one pipe read

    async def body() -> None:
        pipe, write_fd = pipe_pair()
        stream = Stream()
        PipeReader(pipe, 1000, stream.chunk, stream.end)
        os.write(write_fd, whole)
        os.close(write_fd)
        await asyncio.wait_for(stream.ended.wait(), 10)
        assert b"".join(stream.chunks) == whole
        assert max(len(chunk) for chunk in stream.chunks) <= 1000
        assert len(stream.chunks) >= len(whole) // 1000

    run(leak_free(body()))


def test_a_paused_pipe_is_not_read_until_it_resumes(run: Runner[None]) -> None:
    async def body() -> None:
        pipe, write_fd = pipe_pair()
        stream = Stream()
        reader = PipeReader(pipe, 1024, stream.chunk, stream.end)
        reader.pause()
        reader.pause()  # twice is once
        os.write(write_fd, b"held")
        os.close(write_fd)
        await asyncio.sleep(0.1)
        assert stream.chunks == []
        assert stream.ends == 0
        reader.resume()
        await asyncio.wait_for(stream.ended.wait(), 10)
        assert stream.chunks == [b"held"]

    run(leak_free(body()))


def test_an_exit_is_seen_while_a_grandchild_holds_the_pipes(run: Runner[None]) -> None:
    """The process exits; its pipes stay open, held by the sleep it left running: the
    exit is reported all the same, and closing the readers gives the pipes back."""

    async def body() -> None:
        popen = subprocess.Popen(
            ["sh", "-c", "sleep 60 & echo $!; exit 3"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert popen.stdout is not None
        assert popen.stderr is not None
        out, err = Stream(), Stream()
        readers = [
            PipeReader(popen.stdout, 4096, out.chunk, out.end),
            PipeReader(popen.stderr, 4096, err.chunk, err.end),
        ]
        exits: list[int] = []
        watch = ExitWatch(popen, 0.05, exits.append)
        try:
            assert await asyncio.wait_for(asyncio.shield(watch.exited), 10) == 3
            assert exits == [3]  # once
            assert popen.returncode == 3  # collected
            await asyncio.sleep(0.2)
            assert (out.ends, err.ends) == (0, 0)  # the sleep still holds both pipes
            grandchild = int(b"".join(out.chunks))
        finally:
            for reader in readers:
                reader.close()
            watch.close()
        assert popen.stdout.closed
        assert popen.stderr.closed
        os.kill(grandchild, signal.SIGKILL)

    run(leak_free(body()))


def test_an_exit_is_polled_without_pidfds(
    run: Runner[None], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)

    async def body() -> None:
        popen = subprocess.Popen(["sh", "-c", "sleep 0.1; exit 7"])
        watch = ExitWatch(popen, 0.01)
        assert await asyncio.wait_for(asyncio.shield(watch.exited), 10) == 7
        watch.close()

    run(leak_free(body()))


def test_a_watch_closed_before_the_exit_still_collects_the_process(run: Runner[None]) -> None:
    """A caller cancelled while its process dies closes the watch early: the process
    must still be collected, never left a zombie, and the pidfd given back then."""

    async def body() -> None:
        popen = subprocess.Popen(["sleep", "0.2"])
        watch = ExitWatch(popen, 0.05)
        watch.close()  # not collected yet: the watch stays
        assert await asyncio.wait_for(asyncio.shield(watch.exited), 10) == 0
        assert popen.returncode == 0
        with pytest.raises(ChildProcessError):
            os.waitpid(popen.pid, os.WNOHANG)  # nothing left to collect

    run(leak_free(body()))


def test_a_killed_process_exits_with_minus_the_signal(run: Runner[None]) -> None:
    async def body() -> None:
        popen = subprocess.Popen(["sleep", "60"])
        watch = ExitWatch(popen, 0.05)
        try:
            popen.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(asyncio.shield(watch.exited), 10) == -signal.SIGKILL
        finally:
            with suppress(ProcessLookupError):
                popen.kill()
            watch.close()

    run(leak_free(body()))
