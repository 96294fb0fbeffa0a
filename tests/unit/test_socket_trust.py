"""Which socket directories daemon and client trust (``api.untrusted_directory``)."""

from __future__ import annotations

import os
from pathlib import Path

from sloopd.wire import api

NOBODY = 65534


def test_a_private_directory_of_ours_is_trusted(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    assert api.untrusted_directory(mine) is None
    assert api.untrusted_directory(tmp_path / "not-yet") is None  # whoever creates it owns it


def test_another_users_directory_is_refused_naming_its_owner(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    reason = api.untrusted_directory(theirs)
    assert reason is not None
    assert f"uid {NOBODY}" in reason
    assert str(theirs) in reason


def test_a_symlink_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    reason = api.untrusted_directory(link)
    assert reason is not None
    assert f"uid {NOBODY}" in reason


def test_a_group_or_world_writable_directory_is_refused(tmp_path: Path) -> None:
    for mode in (0o770, 0o707, 0o777):
        shared = tmp_path / f"shared-{mode:o}"
        shared.mkdir()
        os.chmod(shared, mode)
        reason = api.untrusted_directory(shared)
        assert reason is not None, mode
        assert "writable by group or others" in reason, mode


def test_a_root_owned_sticky_directory_is_trusted_as_a_parent(tmp_path: Path) -> None:
    sticky = tmp_path / "tmp-like"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    os.chown(sticky, 0, 0)
    assert api.untrusted_directory(sticky) is None
    socket = sticky / "sloop-x" / "operator.sock"
    (sticky / "sloop-x").mkdir(mode=0o700)
    assert api.untrusted_socket_path(socket) is None
    os.chmod(sticky / "sloop-x", 0o777)
    assert api.untrusted_socket_path(socket) is not None
