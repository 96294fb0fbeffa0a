"""Where a stage's child runs as a process: ``ChildLauncher``, the one local ``stage_io.Launcher``.

It is built by composition from what it must know, computed by whoever builds it:
the process groups it spawns in (``Groups``), where the allowlisted variables'
values come from (``Environ``: this host's environment, or on a Ray node the
daemon's), and, for a sandboxed child, the places no child may see and the object
store its checkout borrows (``SandboxPlaces``; None: ``sandbox = "none"``, a plain
child, unsafe).  The daemon builds it from its layout (``protected_paths``); a Ray
node from its own folder and Ray's (``sloopd.remote.node``): the same class, the
same bubblewrap command line, mount rules and environment allowlist on both.  It
reads nothing but the ``StageLaunch`` it is handed and those values, so a test runs
it over a recording fake of the groups.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from sloopd.proc import sandbox
from sloopd.proc.children import ChildSpawnError
from sloopd.proc.environment import child_environment
from sloopd.proc.lines import OnLines
from sloopd.proc.stage_io import Exited, LaunchRefused, StageLaunch

# Turns (argv, the child's complete environment) into the command that runs it sandboxed.
Wrap = Callable[[list[str], dict[str, str]], list[str]]


class ChildProcess(Protocol):
    """What a launcher needs of a started process group (``sloopd.proc.children.Child``)."""

    last_output_monotonic: float

    async def wait(self) -> int: ...

    async def stop(self) -> None: ...


ChildT = TypeVar("ChildT", bound=ChildProcess)


class Groups(Protocol[ChildT]):
    """``sloopd.proc.children.ProcessGroups`` as the launchers use it: spawn, reap."""

    async def spawn(
        self,
        argv: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        owner: str,
        on_lines: OnLines,
        sandbox: Wrap | None = None,
    ) -> ChildT: ...

    async def reap_leftovers(self, child: ChildT) -> None: ...


class LocalChild(Generic[ChildT]):
    """A child in a process group on this host, as a ``RunningChild``."""

    def __init__(self, child: ChildT, groups: Groups[ChildT]) -> None:
        self.child = child
        self._groups = groups

    @property
    def last_output_monotonic(self) -> float:
        return self.child.last_output_monotonic

    @last_output_monotonic.setter
    def last_output_monotonic(self, value: float) -> None:
        self.child.last_output_monotonic = value

    @property
    def node(self) -> Mapping[str, str] | None:
        return None  # this host

    async def wait_started(self) -> bool:
        return True  # a process group runs once spawned

    async def stop(self) -> None:
        await self.child.stop()

    async def end(self) -> Exited:
        code = await self.child.wait()
        # Whatever it left in its group (or marked outside it) is stopped before the
        # stage goes on, so nothing of one execution outlives it; its work stays in the
        # checkout here, for the workspace to take back (sloopd.git.workspace).
        await self._groups.reap_leftovers(self.child)
        return Exited(exit_code=code)


def _expand(path: str) -> tuple[Path, str]:
    """(host source, target inside): ``~/x`` is the operator's ``x``, seen in the run's HOME."""
    if path.startswith("~/"):
        return Path(os.path.expanduser(path)), f"{sandbox.HOME_PATH}/{path[2:]}"
    return Path(path), path


def _installation() -> list[Path]:
    """Sloop's own files, so ``sloopctl`` (and the interpreter it needs) works inside."""
    places = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(os.path.realpath(sys.executable)).parent,
    }
    for package in ("sloopd", "sloopctl"):  # an editable install lives in its source tree
        found = importlib.util.find_spec(package)
        if found is not None and found.origin:
            places.add(Path(found.origin).resolve().parent)
    return sorted(places)


def _named_paths(argv: Iterable[str], path_env: str) -> list[Path]:
    """The files and folders a command line names: an agent script must run as it does."""
    named: list[Path] = []
    for index, part in enumerate(argv):
        if index == 0 and "/" not in part:
            found = shutil.which(part, path=path_env)
            if found:
                named += [Path(found), Path(os.path.realpath(found))]
            continue
        if part.startswith("/") and os.path.lexists(part):
            named += [Path(part), Path(os.path.realpath(part))]
    return named


def _overlaps(path: Path, protected: Iterable[Path]) -> Path | None:
    real = Path(os.path.realpath(path))
    for guarded in protected:
        if real == guarded or guarded in real.parents or real in guarded.parents:
            return guarded
    return None


def protected_paths(
    state_dir: Path, socket_dir: Path, repo: Path, common_dir: Path
) -> tuple[Path, ...]:
    """What no child may see: the store, the repository (its .git and untracked files
    alike: a ``.env`` is readable otherwise), the sockets, and the repository's git
    directory (objects, refs, config and hooks) wherever it is."""
    places = [state_dir, socket_dir, common_dir, repo]
    return tuple(Path(os.path.realpath(p)) for p in places)


@dataclass(frozen=True, slots=True)
class SandboxPlaces:
    """What a sandboxed child is kept from, and what its checkout borrows.

    ``hide``: every place no child may see, resolved (the daemon's store, sockets and
    repository; on a node, Sloop's node folder and Ray's session folder).
    ``objects``: the object store the checkout's ``.git`` points into, shown read-only.
    """

    hide: tuple[Path, ...]
    objects: Path


# Where PATH, the locale and the passed names' values come from, read at each start.
Environ = Callable[[], Mapping[str, str]]


def this_host() -> Mapping[str, str]:
    """The daemon's own environment, as it is now."""
    return os.environ


class ChildLauncher(Generic[ChildT]):
    """Starts a stage's child in a process group: in bubblewrap when ``places`` is
    given (see ``sloopd.proc.sandbox`` for what it sees), else as a plain child."""

    def __init__(
        self,
        groups: Groups[ChildT],
        places: SandboxPlaces | None,
        environ: Environ = this_host,
    ) -> None:
        self.groups = groups
        self.places = places
        self.environ = environ

    def unavailable(self) -> str | None:
        # A plain child needs nothing this host may lack; a sandbox needs bwrap to work.
        return sandbox.probe() if self.places is not None else None

    def environment(self, launch: StageLaunch) -> dict[str, str]:
        inside = self.places is not None
        checkout = sandbox.CHECKOUT_PATH if inside else str(launch.checkout)
        home = sandbox.HOME_PATH if inside else str(launch.home)

        def seen(host: Path, sandboxed: str) -> str:
            return sandboxed if inside else str(host)

        sloop = {**launch.variables, "SLOOP_WORKTREE": checkout}
        if launch.worker_socket is not None and launch.token is not None:
            sloop["SLOOP_SOCKET"] = seen(launch.worker_socket, sandbox.WORKER_SOCKET_PATH)
            if launch.token_env:
                sloop["SLOOP_TOKEN"] = launch.token
            if launch.token_file is not None:
                sloop["SLOOP_TOKEN_FILE"] = seen(launch.token_file, sandbox.TOKEN_PATH)
        if launch.prompt_file is not None:
            sloop["SLOOP_PROMPT_FILE"] = seen(launch.prompt_file, sandbox.PROMPT_PATH)
        return child_environment(self.environ(), passed=launch.passed, home=home, sloop=sloop)

    def spec(self, launch: StageLaunch, env: Mapping[str, str]) -> sandbox.SandboxSpec:
        places = self.places
        if places is None:
            raise LaunchRefused("a child without a sandbox has no sandbox spec (a bug)")
        protected = places.hide
        mounts: list[sandbox.Mount] = []
        # Login files are read-only mounts like the operator's own, and checked the
        # same way; a missing one is skipped (no login, no mount).
        for raw, writable in [(p, False) for p in launch.ro_mounts] + [
            (p, True) for p in launch.rw_mounts
        ]:
            source, target = _expand(raw)
            guarded = _overlaps(source, protected)
            if guarded is not None:
                raise LaunchRefused(
                    f"agent mount {raw} would expose {guarded} to the sandbox; "
                    "mount something that does not contain or sit inside it"
                )
            if source.exists():
                _make_mount_point(launch.home, target, source)
                mounts.append(sandbox.Mount(source, target, writable))
        shared = [m.source for m in mounts if m.writable]
        candidates = [
            path
            for path in [*_installation(), *_named_paths(launch.argv, env["PATH"])]
            if sandbox.hidden_by_default(path) and _overlaps(path, protected) is None
        ]
        # A path inside another bound folder needs no bind of its own (and bwrap could
        # not make its mount point inside a read-only bind).
        folders = [*shared, *(p for p in candidates if p.is_dir() and not p.is_symlink())]
        visible = [
            path for path in candidates if not any(f != path and f in path.parents for f in folders)
        ]
        visible = [path for path in visible if path not in shared]
        return sandbox.SandboxSpec(
            checkout=launch.checkout,
            home=launch.home,
            worker_socket=launch.worker_socket if launch.token else None,
            token_file=launch.token_file if launch.token else None,
            prompt_file=launch.prompt_file,
            objects=places.objects,
            hide=protected,
            ro_mounts=tuple(m for m in mounts if not m.writable),
            rw_mounts=tuple(m for m in mounts if m.writable),
            visible_paths=tuple(dict.fromkeys(visible)),
            network=launch.network,
            env=env,
            overlay=launch.overlay,
        )

    async def start(self, launch: StageLaunch, on_lines: OnLines) -> LocalChild[ChildT]:
        env = self.environment(launch)
        wrap: Wrap | None = None
        if self.places is not None:
            spec = self.spec(launch, env)

            def wrap(argv: list[str], child_env: dict[str, str]) -> list[str]:
                return sandbox.command(replace(spec, env=dict(child_env)), argv)

        try:
            child = await self.groups.spawn(
                list(launch.argv),
                cwd=launch.checkout,
                env=env,
                owner=launch.owner,
                on_lines=on_lines,
                sandbox=wrap,
            )
        except ChildSpawnError as exc:
            raise LaunchRefused(str(exc)) from exc
        return LocalChild(child, self.groups)


def _make_mount_point(home: Path, target: str, source: Path) -> None:
    """Create a mount target inside the run's HOME as the daemon, checking every step.

    bubblewrap creates a missing mount point itself, following whatever symlinks it
    meets: an agent that left ``~/.claude`` as a link to the operator's repository
    had an empty ``.credentials.json`` created there.  HOME is made anew for each
    child, so nothing of an agent should be there; every component is still checked
    with ``lstat`` and a symlink or a non-directory is refused.
    """
    prefix = sandbox.HOME_PATH + "/"
    if not target.startswith(prefix):
        return  # outside HOME: a path of the host's own, not one an agent wrote
    parts = Path(target[len(prefix) :]).parts
    where = home
    for name in parts[:-1]:
        where = where / name
        if where.is_symlink() or (where.exists() and not where.is_dir()):
            raise LaunchRefused(
                f"the mount point {target} lies under {where}, which is not a folder the "
                "daemon made (a symlink or a file); the child was not started"
            )
        where.mkdir(mode=0o700, exist_ok=True)
    point = where / parts[-1]
    if point.is_symlink():
        raise LaunchRefused(f"the mount point {target} is a symlink; the child was not started")
    if not point.exists():
        if source.is_dir():
            point.mkdir(mode=0o700)
        else:
            point.touch(mode=0o600)
