"""Where a child runs: the one seam between the walk and a process.

The executor asks for "this argv, in this run's checkout, with these variables,
network on or off"; a ``Launcher`` decides where that is.  ``SandboxLauncher``
runs it in a bubblewrap sandbox on this host (the default); ``HostLauncher``
runs it as a plain child (``sandbox = "none"``, unsafe).  Both stream lines,
stop on request and report the exit through the same ``Child``; a remote
launcher (Kubernetes) can stand behind the same two methods later.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from sloopd.core.paths import Layout, git_common_dir
from sloopd.flows.flow import AgentSettings
from sloopd.proc import sandbox
from sloopd.proc.children import Child, ProcessGroups
from sloopd.proc.environment import child_environment
from sloopd.proc.lines import OnLines


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    argv: tuple[str, ...]
    checkout: Path  # the run's checkout on this host
    home: Path  # the run's own HOME on this host
    owner: str  # who the process group belongs to, for the registry
    variables: Mapping[str, str] = field(default_factory=dict)  # SLOOP_* that name no path
    worker_socket: Path | None = None
    token: str | None = None
    prompt_file: Path | None = None
    network: bool = True
    # The run's admitted agent settings (env, mounts); the current ones when None.
    settings: AgentSettings | None = None
    # Names the stage's or seat's preset passes through, beside agent.env.
    passed: tuple[str, ...] = ()
    # The stage's or seat's preset's login files, beside agent.logins.
    logins: tuple[str, ...] = ()


class LaunchRefused(Exception):
    """The child cannot be started as asked; the message says why, for the stage's reason."""


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


class HostLauncher:
    """``sandbox = "none"``: the child runs on the host with the allowlisted environment."""

    sandboxed = False

    def __init__(
        self, layout: Layout, settings: Callable[[], AgentSettings], groups: ProcessGroups
    ) -> None:
        self.layout = layout
        self._settings = settings  # read at each start: a reload applies to the next child
        self.groups = groups

    @property
    def agent(self) -> AgentSettings:
        return self._settings()

    def environment(self, request: LaunchRequest) -> dict[str, str]:
        return self._environment(request, checkout=str(request.checkout), home=str(request.home))

    def _environment(self, request: LaunchRequest, *, checkout: str, home: str) -> dict[str, str]:
        sloop = {**request.variables, "SLOOP_WORKTREE": checkout}
        if request.worker_socket is not None and request.token is not None:
            sloop["SLOOP_SOCKET"] = self._inside(request.worker_socket, sandbox.WORKER_SOCKET_PATH)
            sloop["SLOOP_TOKEN"] = request.token
        if request.prompt_file is not None:
            sloop["SLOOP_PROMPT_FILE"] = self._inside(request.prompt_file, sandbox.PROMPT_PATH)
        agent = request.settings or self.agent
        names = (*agent.env, *request.passed)
        return child_environment(os.environ, passed=names, home=home, sloop=sloop)

    def _inside(self, host: Path, _sandboxed: str) -> str:
        return str(host)

    async def start(self, request: LaunchRequest, on_lines: OnLines) -> Child:
        return await self.groups.spawn(
            list(request.argv),
            cwd=request.checkout,
            env=self.environment(request),
            owner=request.owner,
            on_lines=on_lines,
        )


class SandboxLauncher(HostLauncher):
    """Every child in bubblewrap: see ``sloopd.proc.sandbox`` for what it sees."""

    sandboxed = True

    def environment(self, request: LaunchRequest) -> dict[str, str]:
        return self._environment(request, checkout=sandbox.CHECKOUT_PATH, home=sandbox.HOME_PATH)

    def _inside(self, host: Path, sandboxed: str) -> str:
        return sandboxed

    def __init__(
        self, layout: Layout, settings: Callable[[], AgentSettings], groups: ProcessGroups
    ) -> None:
        super().__init__(layout, settings, groups)
        # The repository's git directory: objects, refs, config and hooks alike.
        self.common_dir = Path(os.path.realpath(git_common_dir(layout.repo)))

    def protected(self) -> list[Path]:
        """What no child may see: the store, the repository (its .git and untracked
        files alike: a ``.env`` is readable otherwise), the sockets."""
        places = [self.layout.state_dir, self.layout.socket_dir, self.common_dir, self.layout.repo]
        return [Path(os.path.realpath(p)) for p in places]

    def spec(self, request: LaunchRequest, env: Mapping[str, str]) -> sandbox.SandboxSpec:
        protected = self.protected()
        mounts: list[sandbox.Mount] = []
        agent = request.settings or self.agent
        # A preset's login files are read-only mounts like the operator's own, and
        # checked the same way; a missing one is skipped (no login, no mount).
        logins = dict.fromkeys((*agent.logins, *request.logins))
        for raw, writable in [(p, False) for p in (*agent.ro_mounts, *logins)] + [
            (p, True) for p in agent.rw_mounts
        ]:
            source, target = _expand(raw)
            guarded = _overlaps(source, protected)
            if guarded is not None:
                raise LaunchRefused(
                    f"agent mount {raw} would expose {guarded} to the sandbox; "
                    "mount something that does not contain or sit inside it"
                )
            if source.exists():
                mounts.append(sandbox.Mount(source, target, writable))
        shared = [m.source for m in mounts if m.writable]
        candidates = [
            path
            for path in [*_installation(), *_named_paths(request.argv, env["PATH"])]
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
            checkout=request.checkout,
            home=request.home,
            worker_socket=request.worker_socket if request.token else None,
            prompt_file=request.prompt_file,
            objects=self.common_dir / "objects",
            hide=tuple(protected),
            ro_mounts=tuple(m for m in mounts if not m.writable),
            rw_mounts=tuple(m for m in mounts if m.writable),
            visible_paths=tuple(dict.fromkeys(visible)),
            network=request.network,
            env=env,
        )

    async def start(self, request: LaunchRequest, on_lines: OnLines) -> Child:
        env = self.environment(request)
        spec = self.spec(request, env)

        def wrap(argv: list[str], child_env: dict[str, str]) -> list[str]:
            return sandbox.command(_with_env(spec, child_env), argv)

        return await self.groups.spawn(
            list(request.argv),
            cwd=request.checkout,
            env=env,
            owner=request.owner,
            on_lines=on_lines,
            sandbox=wrap,
        )


def _with_env(spec: sandbox.SandboxSpec, env: Mapping[str, str]) -> sandbox.SandboxSpec:
    return replace(spec, env=dict(env))


Launcher = HostLauncher | SandboxLauncher
