"""Podman as the deployment tests run it: a configuration and a storage of their own.

Rootful podman 4.3 (Debian 12) starts no container on this kind of host out of the
box, and the fixes must not touch the host's own configuration, so every podman this
module starts reads ``CONTAINERS_CONF`` and ``CONTAINERS_STORAGE_CONF`` files it
writes under the cache (``~/.cache/sloop/deploy/podman``): the images it builds and
the containers it starts live there, apart from anything else on the machine.

What cannot be had here is a test failure under ``CI=true`` and a skip with its
reason elsewhere (``unavailable``): CI must never pass by skipping the deployment.
"""

from __future__ import annotations

import fcntl
import os
import resource
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

# Every container and image tag a session makes starts with this and ends with the
# session's pid, so a leftover of a killed session can be told from a live one.
PREFIX = "sloop-test"


def cache_root() -> Path:
    """~/.cache/sloop/deploy (XDG_CACHE_HOME honoured), beside the agent CLIs' cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sloop" / "deploy"


def unavailable(reason: str) -> NoReturn:
    """Skip with the reason, or fail under CI=true: CI must run the deployment."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"deployment test cannot run (CI=true, so this fails): {reason}")
    pytest.skip(reason)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path``: two sessions (two checkouts' ``make test``) share the
    cache, and must not build the same base or repository at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def containers_conf(nofile: int) -> str:
    """The engine fixes this host kind needs, as a containers.conf.

    - ``default_ulimits``: root here lacks CAP_SYS_RESOURCE, so the runtime cannot
      raise RLIMIT_NOFILE above the host's hard limit (podman asks 1048576), and podman
      lowers its own RLIMIT_NPROC to 32768 before starting the runtime.
    - ``runtime = "runc"``: crun refuses the host's hybrid cgroups (v1 plus a cgroup2
      holding only hugetlb).
    - ``cgroup_manager = "cgroupfs"``, ``events_logger = "file"``: no systemd runs on
      the host to hand cgroups or a journal to.
    """
    return (
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc=32768:32768"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )


@dataclass(frozen=True, slots=True)
class Podman:
    """One podman configuration: its files, its storage, the environment to run it in."""

    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "containers.conf"

    @property
    def storage_conf(self) -> Path:
        return self.root / "storage.conf"

    @classmethod
    def create(cls, root: Path) -> Podman:
        podman = cls(root)
        root.mkdir(parents=True, exist_ok=True)
        # nofile is the host's hard limit, read, not assumed: it differs between hosts.
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        nofile = hard if hard != resource.RLIM_INFINITY else 1048576
        conf = containers_conf(nofile)
        # Paths are fixed for the storage's life: podman refuses a database whose
        # recorded graph root, run root or tmp dir differ from the ones configured.
        conf += f'tmp_dir = "{root / "tmp"}"\n'
        conf += f'events_logfile_path = "{root / "events.log"}"\n'
        podman.conf.write_text(conf)
        podman.storage_conf.write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{root / "storage"}"\n'
            f'runroot = "{root / "run"}"\n'
        )
        return podman

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["CONTAINERS_CONF"] = str(self.conf)
        env["CONTAINERS_STORAGE_CONF"] = str(self.storage_conf)
        env.update(extra or {})
        return env

    def run(
        self,
        *args: str,
        timeout: float = 120,
        input: bytes | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``podman ARGS``; with ``check`` a failure raises with podman's own words."""
        done = subprocess.run(
            ["podman", *args],
            env=self.environment(),
            capture_output=True,
            text=input is None,
            input=input,
            timeout=timeout,
            check=False,
        )
        out = done.stdout if isinstance(done.stdout, str) else done.stdout.decode()
        err = done.stderr if isinstance(done.stderr, str) else done.stderr.decode()
        result = subprocess.CompletedProcess(done.args, done.returncode, out, err)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}: {err}")
        return result

    def has_image(self, name: str) -> bool:
        return self.run("image", "exists", name, check=False).returncode == 0

    def remove_leftovers(self) -> None:
        """Containers of sessions that died without cleaning up (their pid is gone)."""
        done = self.run("ps", "-a", "--format", "{{.Names}}", check=False)
        for name in done.stdout.split():
            pid = name.rsplit("-", 1)[-1]
            if name.startswith(PREFIX) and pid.isdigit() and not _alive(int(pid)):
                self.run("rm", "--force", "--time", "0", name, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def require_tools(tools: Sequence[str]) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (`make deploy` installs them)")


def probe(podman: Podman, image: str) -> None:
    """A trivial container, so a host that cannot run containers at all skips (or, under
    CI, fails) once with podman's reason instead of failing every test its own way."""
    done = podman.run("run", "--rm", "--network", "none", image, "true", check=False)
    if done.returncode != 0:
        unavailable(f"this host cannot run a container: {done.stderr.strip()}")


def session_name(what: str) -> str:
    return f"{PREFIX}-{what}-{os.getpid()}"
