"""A private socket is born 0600 without narrowing the process umask.

The umask is one per process.  ``bound_private`` once narrowed it to 0177 around
``bind``; a thread that made a folder in that moment (the bring-back moving objects
into ``objects/<xx>/``) made it 0600, a folder nobody without CAP_DAC_OVERRIDE can
enter.  Every later fetch whose objects lay there failed in its sandbox
(``fatal: oops (<sha>)`` from upload-pack, which lists the folder but cannot open
the file), so a drain settled hundreds of runs as failed (2026-12-07).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sloopd.wire.connection import bound_private


@pytest.fixture
def umask_022() -> Iterator[int]:
    previous = os.umask(0o022)
    try:
        yield 0o022
    finally:
        os.umask(previous)


def test_the_socket_is_0600_from_birth_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        sock = bound_private(tmp_path / "s")
    finally:
        os.umask(previous)
    try:
        assert stat.S_IMODE(os.stat(tmp_path / "s").st_mode) == 0o600
    finally:
        sock.close()


def test_binding_never_changes_the_process_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_022: int
) -> None:
    """Not even for a moment: every thread's files take the umask as it is then."""
    real_umask = os.umask
    set_to: list[int] = []

    def recording(mask: int) -> int:
        set_to.append(mask)
        return real_umask(mask)

    monkeypatch.setattr(os, "umask", recording)
    bound_private(tmp_path / "s").close()
    assert set_to == []


def test_folders_made_by_another_thread_while_sockets_are_bound_can_be_entered(
    tmp_path: Path, umask_022: int
) -> None:
    """The observed fault: a thread's ``mkdir`` during a ``bind`` lost its x bits."""
    made = tmp_path / "made"
    made.mkdir()
    binding = threading.Event()
    modes: list[int] = []

    def make_folders() -> None:
        binding.wait()
        n = 0
        while binding.is_set():
            folder = made / str(n)
            folder.mkdir()
            modes.append(stat.S_IMODE(folder.stat().st_mode))
            folder.rmdir()
            n += 1

    maker = threading.Thread(target=make_folders)
    maker.start()
    binding.set()
    try:
        for n in range(400):
            bound_private(tmp_path / f"s{n}").close()
    finally:
        binding.clear()
        maker.join()
    assert modes
    assert set(modes) == {0o777 & ~umask_022}


def test_a_kernel_that_refuses_fchmod_on_a_socket_still_gets_a_0600_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_022: int
) -> None:
    """Where fchmod on a socket is refused (an older kernel, a seccomp filter), the
    daemon still starts, and the file is made 0600 once it exists (it is born in the
    0700 socket directory).  Fails if the refusal is let through."""

    def refused(fd: int, mode: int) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "fchmod", refused)
    sock = bound_private(tmp_path / "s")
    try:
        assert stat.S_IMODE(os.stat(tmp_path / "s").st_mode) == 0o600
    finally:
        sock.close()
