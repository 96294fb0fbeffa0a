"""``sloopd.runs.disk_full``: which failures of a run's git are the disk's, and what they say.

A failure is the disk's when its words say so (git's "No space left on device",
Python's ENOSPC) or when one of the places the run writes has less than
``LOW_ROOM_BYTES`` free (0.8.0's "cannot read the files of …: no message.": the
listing's own error file could not be written either).  Its reason names the fullest
filesystem and its free bytes; its class, ``disk_full``, is transient.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from sloopd.flows.diagnosed import TRANSIENT_CLASSES, is_transient
from sloopd.flows.flow import Stage
from sloopd.git.checkout import CheckoutError
from sloopd.runs import disk_full
from sloopd.util.diskspace import Space, says_no_room

MiB = 1 << 20
NO_MESSAGE = CheckoutError("cannot read the files of /state/checkouts/R1: no message.")


@pytest.fixture
def spaces(monkeypatch: pytest.MonkeyPatch) -> dict[Path, Space]:
    """The free space each place has, as the test says (unknown places: unreadable)."""
    told: dict[Path, Space] = {}
    monkeypatch.setattr(disk_full, "space_of", told.get)
    monkeypatch.setattr(disk_full, "mount_of", lambda path: Path("/state"))
    return told


def test_a_failure_with_no_words_on_a_full_disk_is_the_disks(spaces: dict[Path, Space]) -> None:
    spaces[Path("/state/checkouts/R1")] = Space(12 * 1024, 8 * MiB)
    spaces[Path("/repo/.git")] = Space(900 * MiB, 1000 * MiB)
    cause = disk_full.cause(NO_MESSAGE, [Path("/repo/.git"), Path("/state/checkouts/R1")])
    assert cause == (
        "12.0 KiB of 8.0 MiB free on the filesystem of /state/checkouts/R1, mounted at "
        "/state; cannot read the files of /state/checkouts/R1: no message"
    )


def test_a_failure_with_room_left_is_not_the_disks(spaces: dict[Path, Space]) -> None:
    spaces[Path("/state")] = Space(2 * MiB, 8 * MiB)
    assert disk_full.cause(NO_MESSAGE, [Path("/state")]) is None
    assert disk_full.cause(NO_MESSAGE, [Path("/unreadable")]) is None


@pytest.mark.parametrize(
    "error",
    [
        CheckoutError(
            "checking out 0123456789ab in /state/checkouts/R1 failed: "
            "fatal: unable to write new index file: No space left on device."
        ),
        CheckoutError("creating /state/checkouts/R1 failed: error: Disk quota exceeded."),
        OSError(errno.ENOSPC, "No space left on device", "/state/runs/R1/git-home"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
    ],
)
def test_a_failure_that_says_no_room_is_the_disks_whatever_is_free_now(
    spaces: dict[Path, Space], error: Exception
) -> None:
    """Space may have come back between the failure and the look: the words decide."""
    spaces[Path("/state")] = Space(7 * MiB, 8 * MiB)
    cause = disk_full.cause(error, [Path("/state")])
    assert cause is not None
    assert cause.startswith("7.0 MiB of 8.0 MiB free on the filesystem of /state; ")
    assert not cause.endswith(".")
    unknown = disk_full.cause(error, [Path("/unreadable")])
    assert unknown is not None
    assert unknown.startswith("no space left on the disk (")


def test_an_os_error_is_told_with_the_file_it_wrote(spaces: dict[Path, Space]) -> None:
    spaces[Path("/state")] = Space(0, 8 * MiB)
    error = OSError(errno.ENOSPC, "No space left on device", "/state/runs/R1/git-home")
    cause = disk_full.cause(error, [Path("/state")])
    assert cause is not None
    assert cause.endswith("; writing /state/runs/R1/git-home: No space left on device")


def test_the_stage_fails_disk_full_a_transient_class() -> None:
    result = disk_full.failed("0 B of 8.0 MiB free on the filesystem of /state; no message")
    assert not result.passed
    assert result.reason == (
        "out of disk space: 0 B of 8.0 MiB free on the filesystem of /state; no message"
    )
    assert result.diagnosis is not None
    assert result.diagnosis["classification"] == "disk_full"
    assert "disk_full" in TRANSIENT_CLASSES
    # An agent stage and a command stage alike: queued again, no return_to spent.
    assert is_transient(Stage("implement", "agent"), result.diagnosis)
    assert is_transient(Stage("check", "command"), result.diagnosis)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("error: unable to write file a.txt: No space left on device", True),
        ("fatal: write error: no space left on device", True),
        ("error: Disk quota exceeded", True),
        ("fatal: not a git repository: '/sloop/work/.git'", False),
        ("", False),
    ],
)
def test_no_room_words(text: str, said: bool) -> None:
    assert says_no_room(text) is said
