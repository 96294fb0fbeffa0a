"""Start-up and store maintenance on a full disk: one line that names the state
directory and the fix.

A daemon started where its state directory's filesystem has no room left could not
take its lock, open its store, record its recovery or write ``daemon.json``; 0.7.0
died in the last of these with a traceback.  It is refused up front (and wherever a
write of start-up finds no room after all) with exit status ``DISK_FULL_EXIT``, so a
supervisor can tell "try again once there is space" from a configuration error (1).
The ``sloopd store`` commands that write (a backup, a restore, a migration) end the
same way (0.8.0 printed a traceback), and leave the store as it was.
"""

from __future__ import annotations

from pathlib import Path

from sloopd.store.db import disk_full_error
from sloopd.util.diskspace import is_no_room, space_of
from sloopd.util.sizes import format_bytes

# sysexits.h EX_TEMPFAIL: a temporary failure; the same start succeeds once space is freed.
DISK_FULL_EXIT = 75
# What start-up writes before it serves: the lock, the store's WAL and shared memory,
# the recovery's records, daemon.json.  Less than this free counts as a full disk.
STARTUP_FREE_BYTES = 1 << 20


def refusal(state_dir: Path) -> str | None:
    """Why the daemon must not start on ``state_dir``'s filesystem now; None if it may."""
    space = space_of(state_dir)
    if space is None or space.free >= STARTUP_FREE_BYTES:
        return None
    return message(state_dir, space.free)


def message(state_dir: Path, free: int | None = None) -> str:
    """The one line a refused start logs."""
    if free is None:
        space = space_of(state_dir)
        free = None if space is None else space.free
    needed = format_bytes(STARTUP_FREE_BYTES)
    if free is None or free < STARTUP_FREE_BYTES:
        room = f"{'no' if free is None else format_bytes(free)} free, {needed} needed to start"
    else:  # the check passed, a write of start-up found no room after all
        room = f"{format_bytes(free)} free, too little for what start-up writes"
    return (
        f"refusing to start: the filesystem of the state directory {state_dir} is full "
        f"({room}): free space there (or give the daemon another --state-dir) and start again"
    )


def no_room(exc: BaseException, state_dir: Path) -> bool:
    """Whether ``exc`` is the state directory's filesystem having no room.

    SQLite says SQLITE_FULL for most writes the kernel refused, but an I/O error for
    some (its shared-memory file, a sync) and "unable to open" for a file it could not
    create; such an error while less than ``STARTUP_FREE_BYTES`` (or no inode) is free
    counts as the disk's too.
    """
    said = disk_full_error(exc)
    if is_no_room(exc) or said == "full":
        return True
    if said == "maybe" or isinstance(exc, OSError):
        space = space_of(state_dir)
        return space is not None and (space.free < STARTUP_FREE_BYTES or space.no_inodes)
    return False


def maintenance_message(command: str, state_dir: Path) -> str:
    """The one line a ``sloopd store`` command that found no room ends with."""
    space = space_of(state_dir)
    if space is None:
        room = "no room"
    elif space.no_inodes and space.free >= STARTUP_FREE_BYTES:
        room = f"{format_bytes(space.free)} free but no file can be made: no inode is free"
    else:
        room = f"{format_bytes(space.free)} free"
    return (
        f"{command}: the filesystem of the state directory {state_dir} is full ({room}): "
        f"free space there and run it again"
    )
