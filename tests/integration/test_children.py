"""Real child processes under asyncio and uvloop: capture, exit codes, stopping, leftovers."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from sloopd.proc.children import Child, ChildSpawnError, ProcessGroups
from sloopd.proc.lines import MAX_LINE_BYTES

Runner = Callable[[Coroutine[Any, Any, None]], None]
GRACE = 0.5


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner:
    runner: Runner = asyncio.run if request.param == "asyncio" else uvloop.run
    return runner


@pytest.fixture
def tmp() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="c", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def groups(tmp: Path) -> ProcessGroups:
    return ProcessGroups(tmp / "groups", grace_seconds=GRACE)


class Lines:
    """An on_lines callback that records what it was given, line by line."""

    def __init__(self) -> None:
        self.got: list[tuple[str, str, bool]] = []
        self.batches = 0

    def __call__(self, stream: str, texts: list[str], split: bool) -> None:
        assert texts, "a split piece leaves alone"
        assert not split or len(texts) == 1, "a split piece leaves alone"
        self.batches += 1
        self.got.extend((stream, text, split) for text in texts)

    def texts(self, stream: str) -> list[str]:
        return [text for s, text, _ in self.got if s == stream]


async def spawn_py(
    groups: ProcessGroups, tmp: Path, code: str, lines: Lines | None = None
) -> Child:
    script = tmp / f"agent{len(list(tmp.glob('agent*')))}.py"
    script.write_text(textwrap.dedent(code))
    return await groups.spawn(
        [sys.executable, str(script)],
        cwd=tmp,
        env={"PATH": os.environ["PATH"], "FOO": "bar"},
        owner="R1/implement#1",
        on_lines=lines if lines is not None else Lines(),
    )


def marked(marker: str) -> list[int]:
    """Live (non-zombie) processes carrying the marker, found independently of the module."""
    entry = f"SLOOP_CHILD_MARKER={marker}".encode()
    pids = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and entry in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                pids.append(int(name))
        except OSError:
            continue
    return pids


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def finish(groups: ProcessGroups, child: Child) -> int:
    code = await child.wait()
    await groups.reap_leftovers(child)
    return code


def test_streams_tagged_ordered_and_environment(
    run: Runner, groups: ProcessGroups, tmp: Path
) -> None:
    lines = Lines()
    code = """
        import os, sys
        for i in range(3):
            print(f"out{i}", flush=True)
            print(f"err{i}", file=sys.stderr, flush=True)
        marker = os.environ["SLOOP_CHILD_MARKER"]
        print(os.getcwd(), os.environ["FOO"], marker, repr(sys.stdin.read()))
        print(os.getpgid(0) == os.getpid(), flush=True)
    """

    async def body() -> None:
        child = await spawn_py(groups, tmp, code, lines)
        [record] = groups.live()
        assert record["pid"] == record["pgid"] == child.pid == child.pgid
        assert record["marker"] == child.marker
        assert len(child.marker) == 32
        assert record["owner"] == "R1/implement#1"
        assert record["argv"][0] == sys.executable
        assert isinstance(record["started_at_ms"], int)
        assert await finish(groups, child) == 0
        assert groups.live() == []
        assert list((tmp / "groups").iterdir()) == []
        out = lines.texts("stdout")
        assert out[:3] == ["out0", "out1", "out2"]
        assert out[3] == f"{tmp} bar {child.marker} ''"
        assert out[4] == "True"
        assert lines.texts("stderr") == ["err0", "err1", "err2"]
        assert not any(split for _, _, split in lines.got)

    run(body())


def test_partial_last_line_and_invalid_utf8(run: Runner, groups: ProcessGroups, tmp: Path) -> None:
    lines = Lines()
    code = r"""
        import sys
        sys.stdout.buffer.write(b"ok \xff\xfe end\n\nno newline")
        sys.stderr.buffer.write(b"caf\xc3")
    """

    async def body() -> None:
        assert await finish(groups, await spawn_py(groups, tmp, code, lines)) == 0
        assert lines.texts("stdout") == ["ok \ufffd\ufffd end", "", "no newline"]
        assert lines.texts("stderr") == ["caf\ufffd"]

    run(body())


def test_broken_consumer_does_not_stop_capture(
    run: Runner, groups: ProcessGroups, tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def on_lines(stream: str, texts: list[str], split: bool) -> None:
        seen.extend(texts)
        if "boom" in texts:
            raise RuntimeError("consumer bug")

    async def body() -> None:
        code = "import time; print('a\\nboom', flush=True); time.sleep(0.3); print('b')"
        child = await groups.spawn(
            [sys.executable, "-c", code],
            cwd=tmp,
            env={},
            owner="o",
            on_lines=on_lines,
        )
        assert await finish(groups, child) == 0

    with caplog.at_level(logging.ERROR, logger="sloopd.proc.lines"):
        run(body())
    assert seen == ["a", "boom", "b"]
    assert any("on_lines callback failed" in r.getMessage() for r in caplog.records)


def test_long_lines_arrive_in_split_pieces(run: Runner, groups: ProcessGroups, tmp: Path) -> None:
    lines = Lines()
    code = """
        import sys
        sys.stdout.write("x" * 200 * 1024 + "\\nafter\\n" + "é" * 100_000 + "\\n")
        sys.stdout.write("y" * (MAX + 1))
    """.replace("MAX", str(MAX_LINE_BYTES))

    async def body() -> None:
        assert await finish(groups, await spawn_py(groups, tmp, code, lines)) == 0
        got = lines.got
        first = got[:4]
        assert all(stream == "stdout" and split for stream, _, split in first)
        assert [len(text) for _, text, _ in first] == [65536, 65536, 65536, 8192]
        assert "".join(text for _, text, _ in first) == "x" * 200 * 1024
        assert got[4] == ("stdout", "after", False)
        accents = [g for g in got[5:] if g[1].startswith("é")]
        assert len(accents) >= 4
        assert all(split for _, _, split in accents)
        assert all(len(t.encode()) <= MAX_LINE_BYTES for _, t, _ in accents)
        assert "".join(t for _, t, _ in accents) == "é" * 100_000  # no character cut in two
        assert got[-2:] == [("stdout", "y" * MAX_LINE_BYTES, True), ("stdout", "y", True)]

    run(body())


def test_flood_is_delivered_completely(run: Runner, groups: ProcessGroups, tmp: Path) -> None:
    lines = Lines()
    code = """
        import sys
        for i in range(200_000):
            print(i)
            if i % 1000 == 0:
                print(i, file=sys.stderr)
    """

    async def body() -> None:
        child = await spawn_py(groups, tmp, code, lines)
        spawned_at = child.last_output_monotonic
        assert await finish(groups, child) == 0
        assert lines.texts("stdout") == [str(i) for i in range(200_000)]
        assert lines.texts("stderr") == [str(i) for i in range(0, 200_000, 1000)]
        assert spawned_at < child.last_output_monotonic <= time.monotonic()

    run(body())


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("sys.exit(0)", 0),
        ("sys.exit(3)", 3),
        ("os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
    ],
)
def test_exit_codes(
    run: Runner, groups: ProcessGroups, tmp: Path, statement: str, expected: int
) -> None:
    async def body() -> None:
        child = await spawn_py(groups, tmp, f"import os, signal, sys\n{statement}\n")
        assert await finish(groups, child) == expected

    run(body())


def test_stop_escalates_to_sigkill(run: Runner, groups: ProcessGroups, tmp: Path) -> None:
    lines = Lines()
    code = """
        import signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen(["sleep", "60"])  # inherits the ignored SIGTERM
        print("ready", flush=True)
        time.sleep(60)
    """

    async def body() -> None:
        child = await spawn_py(groups, tmp, code, lines)
        await until(lambda: lines.texts("stdout") == ["ready"])
        assert len(marked(child.marker)) == 2
        started = time.monotonic()
        await asyncio.gather(child.stop(), child.stop())
        await child.stop()
        assert await child.wait() == -signal.SIGKILL
        assert time.monotonic() - started < 10
        assert marked(child.marker) == []
        await groups.reap_leftovers(child)
        assert groups.live() == []

    run(body())


def test_stop_is_polite_first(run: Runner, groups: ProcessGroups, tmp: Path) -> None:
    lines = Lines()
    code = 'import time\nprint("ready", flush=True)\ntime.sleep(60)\n'

    async def body() -> None:
        child = await spawn_py(groups, tmp, code, lines)
        await until(lambda: lines.texts("stdout") == ["ready"])
        await child.stop()
        assert await finish(groups, child) == -signal.SIGTERM

    run(body())


def test_grandchild_holding_the_pipes(run: Runner, groups: ProcessGroups, tmp: Path) -> None:
    code = 'import subprocess\nsubprocess.Popen(["sleep", "60"])\nprint("bye")\n'

    async def body() -> None:
        lines = Lines()
        child = await spawn_py(groups, tmp, code, lines)
        started = time.monotonic()
        assert await child.wait() == 0
        assert time.monotonic() - started < 10
        assert lines.texts("stdout") == ["bye"]
        assert len(marked(child.marker)) == 1  # the sleep outlived its parent
        await groups.reap_leftovers(child)
        assert marked(child.marker) == []
        assert groups.live() == []

    run(body())


def test_setsid_escapee_is_found_by_marker(run: Runner, groups: ProcessGroups, tmp: Path) -> None:
    lines = Lines()
    code = """
        import os
        pid = os.fork()
        if pid == 0:
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execvp("sleep", ["sleep", "60"])
        print(pid, flush=True)
    """

    async def body() -> None:
        child = await spawn_py(groups, tmp, code, lines)
        assert await child.wait() == 0
        escapee = int(lines.texts("stdout")[0])
        await until(lambda: marked(child.marker) == [escapee])
        assert os.getpgid(escapee) != child.pgid
        await groups.reap_leftovers(child)
        assert marked(child.marker) == []
        assert groups.live() == []

    run(body())


def test_stop_all_stops_every_group(run: Runner, groups: ProcessGroups, tmp: Path) -> None:
    async def body() -> None:
        children = [await spawn_py(groups, tmp, "import time\ntime.sleep(60)\n") for _ in range(3)]
        assert len(groups.live()) == 3
        await groups.stop_all()
        assert [await c.wait() for c in children] == [-signal.SIGTERM] * 3
        assert all(marked(c.marker) == [] for c in children)
        assert groups.live() == []

    run(body())


def test_recorded_leftovers_killed_after_a_crash(
    run: Runner, groups: ProcessGroups, tmp: Path
) -> None:
    lines = Lines()
    code = """
        import signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen(["sleep", "60"])
        print("ready", flush=True)
        time.sleep(60)
    """
    stranger_env = {"PATH": os.environ["PATH"], "SLOOP_CHILD_MARKER": "f" * 32}
    stranger = subprocess.Popen(["sleep", "60"], env=stranger_env)

    async def body() -> None:
        child = await spawn_py(groups, tmp, code, lines)
        await until(lambda: lines.texts("stdout") == ["ready"])
        victims = sorted(marked(child.marker))
        assert len(victims) == 2
        restarted = ProcessGroups(groups.registry_dir, grace_seconds=GRACE)
        assert sorted(restarted.kill_recorded_leftovers()) == victims
        assert list(groups.registry_dir.iterdir()) == []
        assert await child.wait() == -signal.SIGKILL
        await until(lambda: marked(child.marker) == [])
        assert stranger.poll() is None  # not ours: its marker is not on record
        await groups.reap_leftovers(child)

    try:
        run(body())
    finally:
        stranger.kill()
        stranger.wait()


def test_garbage_and_stale_records_are_removed(
    groups: ProcessGroups, caplog: pytest.LogCaptureFixture
) -> None:
    registry = groups.registry_dir
    (registry / "garbage.json").write_text("{not json")
    (registry / "nomarker.json").write_text('{"pid": 1}')
    stale = {"pgid": 999_999, "pid": 999_999, "marker": "0" * 32, "argv": ["x"], "owner": "o"}
    (registry / f"{'0' * 32}.json").write_text(json.dumps(stale))
    assert len(groups.live()) == 1
    with caplog.at_level(logging.WARNING, logger="sloopd.proc.children"):
        assert groups.kill_recorded_leftovers() == []
    assert list(registry.iterdir()) == []
    assert sum("unreadable" in r.getMessage() for r in caplog.records) == 2


def test_missing_or_unexecutable_program(run: Runner, groups: ProcessGroups, tmp: Path) -> None:
    not_executable = tmp / "plain.sh"
    not_executable.write_text("#!/bin/sh\n")

    async def body() -> None:
        for program in (tmp / "missing", not_executable):
            with pytest.raises(ChildSpawnError, match=re.escape(str(program))):
                await groups.spawn([str(program)], cwd=tmp, env={}, owner="o", on_lines=Lines())
        with pytest.raises(ChildSpawnError, match="empty command"):
            await groups.spawn([], cwd=tmp, env={}, owner="o", on_lines=Lines())
        assert list(groups.registry_dir.iterdir()) == []

    run(body())


def test_without_pidfds(
    run: Runner, groups: ProcessGroups, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kernels or sandboxes without pidfd_open fall back to polling and plain kill."""

    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    lines = Lines()
    code = """
        import signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen(["sleep", "60"])
        print("ready", flush=True)
        time.sleep(60)
    """

    async def body() -> None:
        assert await finish(groups, await spawn_py(groups, tmp, "raise SystemExit(3)")) == 3
        child = await spawn_py(groups, tmp, code, lines)
        await until(lambda: lines.texts("stdout") == ["ready"])
        await child.stop()
        assert await finish(groups, child) == -signal.SIGKILL
        assert marked(child.marker) == []
        assert groups.live() == []

    run(body())
