"""Bringing a checkout's branch back into the main repository, through an inbox.

The fetch that brings an agent's work back does not run in the main repository but in
an *inbox*: a bare repository made for this one fetch inside the main objects directory,
whose alternates line borrows the main objects and whose only ref is the stage's base.
Why: a ``git fetch`` reads every ref of the repository it fetches into, twice (each is
marked complete before the negotiation, and excluded again by the connectivity check
after it), and the main repository gains refs with every run (its branch, its base, a
ref per stage execution).  With 8,000 refs a fetch of one commit took 95 ms packed and
460 ms loose, against 14 ms with a handful (benchmarks/RESULTS.md, issue 36): the
2,000-ticket drain paid it two or three times a run.  In the inbox a fetch reads one ref
whatever the history (``core.alternateRefsCommand`` is ``true``: the main repository's
refs are not listed either; the base ref stops the connectivity walk).

What the inbox received was checked there (``fetch.fsckObjects``; the tip must descend
from the base), so a refused tip's objects never reach the main repository. A fetch
that checks its objects keeps them as a pack however few they are (git unpacks a fetch
of under 100 objects only when it does not check them), and a pack a run would make
the main repository's ``gc --auto`` (past 50 packs) repack every object of it every 50
runs: a small pack (``UNPACK_LIMIT``) is unpacked into loose objects in the inbox, as
an unchecked fetch would have left them. Accepted objects move into the main objects
directory as git's own quarantine moves them (``tmp-objdir.c``): loose objects first,
then each pack before its index, never replacing an object already there (objects are
named by their content). Then the refs move in one ``update-ref`` transaction. The
inbox goes in every case; one a killed daemon left is removed at the next start
(``sweep``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import stat
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from sloopd.git import checkout
from sloopd.git.checkout import (
    CheckoutError,
    _check_ref,
    _Deadline,
    _git,
    git_reason,
    run_bounded,
)
from sloopd.util import trees

# Inside the main objects directory (the same file system: objects move by hard link);
# git itself reads only the two-hex folders, pack/ and info/ of it.
INBOXES: Final = "sloop-inbox"
# An inbox older than this at a start is a killed daemon's (a fetch is bounded by its
# stage's timeout, which is far shorter); a younger one may be another daemon's fetch.
STALE_S: Final = 6 * 3600
_HEX2: Final = re.compile(r"[0-9a-f]{2}\Z")
# Git's quarantine order for pack/ (tmp-objdir.c, pack_copy_priority): a reader that
# sees an index finds its pack.  A .keep is not carried: it would pin the pack forever.
_PACK_ORDER: Final = (".pack", ".rev", ".idx")
# Git's own default for a fetch (``fetch.unpackLimit``): fewer objects than this are left
# loose.  And a small pack only: an agent's one large file is kept packed, not read whole.
UNPACK_LIMIT: Final = 100
UNPACK_MAX_BYTES: Final = 1 << 20
_PACK_SIDECARS: Final = (".idx", ".rev", ".keep", ".promisor")


async def bring_back(
    repo: Path,
    worktree: Path,
    branch: str,
    private_ref: str,
    base_sha: str,
    *,
    sandboxed_upload_pack: Sequence[str] | None,
    timeout: float,
    also: Sequence[str] = (),
) -> str:
    """Fetch the checkout's ``branch`` into ``repo`` as ``private_ref``; return its sha.

    Only a tip that descends from ``base_sha`` moves ``private_ref`` (and the refs ``also``
    names, in the same transaction), so a refused tip never replaces an earlier one.
    ``sandboxed_upload_pack`` comes from ``checkout.upload_pack_command``; None runs git's
    own upload-pack on the host, acceptable only for a checkout no agent wrote.
    """
    deadline = _Deadline(timeout)
    # One deadline over every git call, as the other bring-backs had.
    for ref in (f"refs/heads/{branch}", private_ref, *also):
        await _check_ref(ref, deadline)
    objects, object_format = await checkout.store_of(repo, timeout=deadline.left(f"reading {repo}"))
    base = await _full_sha(repo, base_sha, deadline)
    inbox = objects / INBOXES / uuid.uuid4().hex
    try:
        _make_inbox(inbox, objects, object_format, base)
        sha = await _fetch_checked(inbox, worktree, branch, base, sandboxed_upload_pack, deadline)
        await _unpack_small_packs(inbox, deadline)
        await asyncio.to_thread(_move_objects, inbox / "objects", objects)
        moves = "".join(f"update {ref} {sha}\n" for ref in (private_ref, *also))
        what = f"recording {private_ref}"
        done = await run_bounded(
            ["git", "-C", str(repo), "update-ref", "-m", f"sloop: bring back {branch}", "--stdin"],
            timeout=deadline.left(what),
            what=what,
            stdin=moves.encode(),
        )
        if done.returncode != 0:
            raise CheckoutError(f"{what} failed: {git_reason(done.stderr)}.")
        return sha
    finally:
        # Not bound to the deadline: the inbox goes after a timeout too.
        await trees.remove(inbox)


async def _fetch_checked(
    inbox: Path,
    worktree: Path,
    branch: str,
    base: str,
    upload_pack: Sequence[str] | None,
    deadline: _Deadline,
) -> str:
    """The fetched tip, once the inbox holds it, checked, and it descends from ``base``."""
    fetch = ["-c", "fetch.fsckObjects=true", "-c", "transfer.fsckObjects=true"]
    # The main repository's refs are not read: the inbox's base ref is the only tip the
    # negotiation and the connectivity check start from (O(1) in the main's refs).
    fetch += ["-c", "core.alternateRefsCommand=true", "fetch", "-q", "--no-tags"]
    fetch += ["--no-recurse-submodules", "--no-write-fetch-head", "--no-auto-gc"]
    if upload_pack is not None:
        fetch.append(f"--upload-pack={shlex.join(upload_pack)}")
    fetch += ["--", str(worktree.resolve()), f"+refs/heads/{branch}:refs/heads/incoming"]
    what = f"fetching {branch} from {worktree}"
    # --git-dir, not -C: were the inbox not taken for a repository, git must not go up
    # to the main one.
    where = f"--git-dir={inbox}"
    await _git(None, where, *fetch, deadline=deadline, what=what)
    what = f"checking {branch} from {worktree}"
    sha = await _git(
        None, where, "rev-parse", "--verify", "refs/heads/incoming^{commit}",
        deadline=deadline, what=what,
    )  # fmt: skip
    done = await run_bounded(
        ["git", where, "merge-base", "--is-ancestor", base, sha],
        timeout=deadline.left(what),
        what=what,
    )
    if done.returncode == 1:
        raise CheckoutError(
            f"the branch {branch} in {worktree} (at {sha[:12]}) does not descend from "
            f"its base {base[:12]}, so it was not brought back."
        )
    if done.returncode != 0:
        raise CheckoutError(f"{what} failed: {git_reason(done.stderr)}.")
    return sha


async def _full_sha(repo: Path, base: str, deadline: _Deadline) -> str:
    if checkout.FULL_SHA.match(base):
        return base
    return await _git(
        repo, "rev-parse", "--verify", "--end-of-options", f"{base}^{{commit}}",
        deadline=deadline, what=f"reading the base {base!r} in {repo}",
    )  # fmt: skip


def _make_inbox(inbox: Path, objects: Path, object_format: str, base: str) -> None:
    """A bare repository by hand (no ``git init``, no templates): its base ref, the
    main objects borrowed."""
    (inbox / "objects" / "info").mkdir(parents=True)
    (inbox / "refs" / "heads").mkdir(parents=True)
    (inbox / "objects" / "info" / "alternates").write_text(f"{objects}\n", encoding="utf-8")
    config = "[core]\n\tbare = true\n"
    if object_format == "sha1":
        config += "\trepositoryformatversion = 0\n"
    else:
        config += "\trepositoryformatversion = 1\n[extensions]\n"
        config += f"\tobjectformat = {object_format}\n"
    (inbox / "config").write_text(config, encoding="utf-8")
    (inbox / "HEAD").write_text("ref: refs/heads/base\n", encoding="utf-8")
    (inbox / "refs" / "heads" / "base").write_text(f"{base}\n", encoding="utf-8")


async def _unpack_small_packs(inbox: Path, deadline: _Deadline) -> None:
    """Each small pack the checked fetch kept, as loose objects in the inbox (module
    docstring); objects the main repository has already are not written again."""
    packs = inbox / "objects" / "pack"
    for pack in sorted(packs.glob("pack-*.pack")) if packs.is_dir() else ():
        if not _small_pack(pack):
            continue
        # Out of the object store first: unpack-objects writes only what git cannot
        # find, and it would find every object of this pack in the pack itself.
        data = pack.read_bytes()
        for suffix in _PACK_SIDECARS:
            pack.with_suffix(suffix).unlink(missing_ok=True)
        pack.unlink()
        what = "unpacking the objects brought back"
        done = await run_bounded(
            # No --strict: the fetch's index-pack checked every object of these bytes and
            # its links, and the inbox is the daemon's alone.  A second check looks up
            # every entry of every tree again (12 ms a run at 2,000 files, growing).
            ["git", f"--git-dir={inbox}", "unpack-objects", "-q"],
            timeout=deadline.left(what), what=what, stdin=data,
        )  # fmt: skip
        if done.returncode != 0:
            raise CheckoutError(f"{what} failed: {git_reason(done.stderr)}.")


def _small_pack(pack: Path) -> bool:
    with open(pack, "rb") as stream:
        header = stream.read(12)
        size = os.fstat(stream.fileno()).st_size
    if header[:4] != b"PACK" or size > UNPACK_MAX_BYTES:
        return False
    return int.from_bytes(header[8:12], "big") < UNPACK_LIMIT


def _move_objects(source: Path, objects: Path) -> None:
    """Git's quarantine move: loose objects, then packs before their indexes; an object
    the main directory has already stays as it is."""
    for folder in sorted(source.iterdir()):
        if folder.is_dir() and _HEX2.match(folder.name):
            for item in folder.iterdir():
                _place(item, objects / folder.name / item.name)
    packs = source / "pack"
    if packs.is_dir():
        for suffix in _PACK_ORDER:
            for item in sorted(packs.glob(f"pack-*{suffix}")):
                _place(item, objects / "pack" / item.name)


def _place(item: Path, target: Path) -> None:
    target.parent.mkdir(exist_ok=True)
    try:
        # A link never replaces: the same name is the same content (git's own rule).
        os.link(item, target)
    except FileExistsError:
        return
    except OSError:
        # No hard link possible here: a copy under a name git's prune knows, renamed.
        temporary = target.with_name(f"tmp_obj_sloop_{uuid.uuid4().hex}")
        shutil.copyfile(item, temporary)
        temporary.chmod(0o444)
        os.replace(temporary, target)


def sweep(repo_objects: Path) -> int:
    """Remove the inboxes a killed daemon left (older than ``STALE_S``); how many.

    Also gives back the x bits of object folders a daemon before 0.9.0 made while it
    had narrowed the umask (``sloopd.wire.connection.bound_private``): such a folder
    (0600) could be listed but not entered, and every fetch of its objects failed."""
    _enterable_object_folders(repo_objects)
    folder = repo_objects / INBOXES
    if not folder.is_dir():
        return 0
    removed = 0
    now = time.time()
    for inbox in folder.iterdir():
        with contextlib.suppress(OSError):
            if now - inbox.lstat().st_mtime > STALE_S:
                trees.remove_blocking(inbox)
                removed += 1
    return removed


def _enterable_object_folders(repo_objects: Path) -> None:
    """x wherever r is, on this user's object folders that have r but no x for it."""
    me = os.geteuid()
    with contextlib.suppress(OSError):
        for entry in os.scandir(repo_objects):
            if not _HEX2.match(entry.name) or not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                found = entry.stat(follow_symlinks=False)
                if found.st_uid != me or found.st_mode & stat.S_IXUSR:
                    continue
                readable = found.st_mode & (stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
                os.chmod(entry.path, stat.S_IMODE(found.st_mode) | (readable >> 2))
