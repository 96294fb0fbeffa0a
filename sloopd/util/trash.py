"""Folders set aside at once and deleted off the caller's path: checkouts, run folders.

A stage starts in a checkout made anew; deleting the last one (thousands of files
after a long drain) on the stage's path cost seconds.  ``Trash.set_aside`` renames
the folder into the trash (O(1)) and one sweeper thread deletes what is there,
never following an agent's links (``sloopd.util.trees``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import threading
import uuid
from pathlib import Path

from sloopd.util import trees


class Trash:
    """One trash folder and its one sweeper."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._sweeping: set[asyncio.Task[None]] = set()
        self._sweep_again = False
        self._stopping = threading.Event()  # set by stop; read in the sweep's thread

    def set_aside(self, path: Path) -> bool:
        """Move ``path`` out of the way at once (a rename) and delete it, with whatever
        earlier ones a crash left here, off the loop; False when it cannot be renamed
        (another file system): the caller deletes it.  A symlink or a file where a folder
        should be raises ``trees.NotAFolder``: nothing is followed or deleted."""
        if not path.exists() and not path.is_symlink():
            return True
        if path.is_symlink() or not path.is_dir():
            raise trees.NotAFolder(f"refusing to delete {path}: it is not a directory.")
        self.folder.mkdir(mode=0o700, exist_ok=True)
        try:
            path.rename(self.folder / f"{path.name}-{uuid.uuid4().hex}")
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            return False
        # One sweeper at a time, which goes on while entries come: eight sweeps of the
        # same folder at once deleted the same trees in eight threads, all of them
        # holding the loop's GIL in turn.
        self._sweep_again = True
        if not self._sweeping:
            task = asyncio.get_running_loop().create_task(self._sweep_while_needed())
            self._sweeping.add(task)
            task.add_done_callback(self._sweeping.discard)
        return True

    def stop(self) -> None:
        """The daemon stops: the sweep ends after the entry it is deleting. A backlog of
        set-aside checkouts (thousands of files each after a long drain) held the stop
        past systemd's and the benchmark's grace, until SIGKILL; what is left is swept
        with the next daemon's first set-aside."""
        self._stopping.set()

    async def _sweep_while_needed(self) -> None:
        while self._sweep_again and not self._stopping.is_set():
            self._sweep_again = False
            await asyncio.to_thread(self.sweep)

    def sweep(self) -> None:
        """Delete every entry, unless a stop came: then after the one being deleted."""
        for entry in self.folder.iterdir():
            if self._stopping.is_set():
                return
            with contextlib.suppress(OSError, trees.NotAFolder):
                trees.remove_blocking(entry)
