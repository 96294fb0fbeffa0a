"""The images of the deployment tests, built with no registry and no network.

- The base: ``debootstrap --variant=minbase`` of the host's own Debian release from
  the mirror the host's apt sources name, made to look like ``python:3.11-slim``
  (apt sources in ``sources.list.d``, no PEP 668 marker, no package cache), imported
  with ``podman import``. The tarball is cached, keyed by release and package list.
- Debian packages for the builds: a flat repository of exactly what the base lacks,
  downloaded by the host's apt resolving against the base's own dpkg status.
- Python packages: a wheelhouse of the project's dependencies and build backend.

A build mounts these (``--volume``) over the places apt and pip read their sources
from, with ``--network none``: the Containerfile itself builds unchanged but for
its FROM (``--from``), and on a machine with a registry it does what it always did.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.engine import Podman, locked, unavailable

ROOT = Path(__file__).resolve().parents[2]
# What python:3.11-slim has that a minbase lacks, so the Containerfile's steps run.
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates")
# The Containerfile's apt-get install, plus what the systemd test's image adds
# (procps: the unit's ExecReload runs /bin/kill, which Debian ships there).
BUILD_PACKAGES = ("git", "tini", "ca-certificates", "bubblewrap", "systemd", "procps")
SOURCES = "/etc/apt/sources.list.d"


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def host_release() -> str:
    text = Path("/etc/os-release").read_text()
    match = re.search(r"^VERSION_CODENAME=(\S+)$", text, flags=re.M)
    if match is None:
        unavailable("/etc/os-release names no VERSION_CODENAME: not a Debian host")
    return match.group(1).strip('"')


def host_mirror(release: str) -> str:
    """The Debian mirror the host's apt sources name for ``release`` (one-line or deb822)."""
    apt = Path("/etc/apt")
    files = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]
    for file in files:
        if not file.is_file():
            continue
        text = file.read_text()
        for line in text.splitlines():
            words = re.sub(r"\[[^]]*\]", "", line).split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == release:
                return words[1]
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, flags=re.M))
            uris = str(fields.get("URIs", "")).split()
            if release in str(fields.get("Suites", "")).split() and uris:
                return uris[0]
    unavailable(f"the host's apt sources name no mirror for {release}")


@dataclass(frozen=True, slots=True)
class Offline:
    """The cached inputs of every build: base image, apt repository, wheelhouse."""

    cache: Path
    base: str  # the imported image's name
    debs: Path  # flat apt repository
    apt_sources: Path  # a sources.list.d holding only that repository
    wheels: Path
    pip_conf: Path

    def build_volumes(self) -> list[str]:
        """Mounted over apt's and pip's sources for the build's RUN steps only."""
        return [
            *("--volume", f"{self.debs}:/debs:ro"),
            *("--volume", f"{self.apt_sources}:{SOURCES}:ro"),
            *("--volume", f"{self.wheels}:/wheels:ro"),
            *("--volume", f"{self.pip_conf}:/etc/pip.conf:ro"),
        ]


def prepare(podman: Podman, cache: Path) -> Offline:
    release = host_release()
    base_key = _key(release, BASE_PACKAGES)
    with locked(cache / "lock"):
        rootfs_tar = cache / f"base-{release}-{base_key}.tar"
        status = cache / f"base-{release}-{base_key}.status"
        if not rootfs_tar.exists():
            _debootstrap(release, rootfs_tar, status, cache)
        base = f"localhost/sloop-test-base:{release}-{base_key}"
        if not podman.has_image(base):
            podman.run("import", str(rootfs_tar), base, timeout=300)
        debs = cache / f"debs-{_key(base_key, BUILD_PACKAGES)}"
        if not (debs / "Packages").exists():
            _download_debs(status, debs)
        wheels = cache / f"wheels-{_key(_python_requirements())}"
        if not (wheels / ".complete").exists():
            _wheelhouse(wheels)
        apt_sources = cache / "apt-sources"
        apt_sources.mkdir(exist_ok=True)
        # trusted=yes: the repository is a folder this session's host apt filled.
        (apt_sources / "local.list").write_text("deb [trusted=yes] file:/debs ./\n")
        pip_conf = cache / "pip.conf"
        pip_conf.write_text("[global]\nno-index = true\nfind-links = /wheels\n")
    return Offline(cache, base, debs, apt_sources, wheels, pip_conf)


def _debootstrap(release: str, tarball: Path, status: Path, cache: Path) -> None:
    rootfs = cache / "rootfs.tmp"
    shutil.rmtree(rootfs, ignore_errors=True)
    mirror = host_mirror(release)
    include = ",".join(BASE_PACKAGES)
    argv = ["debootstrap", "--variant=minbase", f"--include={include}", release, str(rootfs)]
    done = subprocess.run([*argv, mirror], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"debootstrap failed: {done.stdout[-2000:]}{done.stderr}")
    # python:3.11-slim's shape: its apt source in sources.list.d (a build mounts a
    # local one over that folder), no downloaded packages, and no PEP 668 marker
    # (the Containerfile installs with the system pip, as it does on python:3.11-slim).
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(
        f"Types: deb\nURIs: {mirror}\nSuites: {release}\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    for deb in (rootfs / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    shutil.copyfile(rootfs / "var/lib/dpkg/status", status)
    partial = tarball.with_suffix(".partial")
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True, timeout=300)
    partial.rename(tarball)
    shutil.rmtree(rootfs)


def _apt_get(status: Path, target: Path) -> subprocess.CompletedProcess[str]:
    # The base's dpkg status instead of the host's: apt downloads exactly what the
    # base lacks (upgrades of its packages included), and touches no host state.
    options = {
        "Dir::State::status": str(status),
        "Dir::Cache": str(target / "apt-cache"),
        "Dir::Cache::archives": str(target) + "/",
        "Dir::Cache::pkgcache": "",
        "Dir::Cache::srcpkgcache": "",
        "Debug::NoLocking": "1",
    }
    argv = ["apt-get", "install", "--download-only", "-y", "-qq", "--no-install-recommends"]
    for name, value in options.items():
        argv += ["-o", f"{name}={value}"]
    return subprocess.run(
        [*argv, *BUILD_PACKAGES], capture_output=True, text=True, timeout=600, check=False
    )


def _download_debs(status: Path, debs: Path) -> None:
    partial = debs.with_suffix(".tmp")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "partial").mkdir(parents=True)
    done = _apt_get(status, partial)
    if done.returncode != 0:  # a fresh host may hold no package lists yet
        subprocess.run(["apt-get", "update", "-qq"], check=True, timeout=600)
        done = _apt_get(status, partial)
    assert done.returncode == 0, done.stdout + done.stderr
    shutil.rmtree(partial / "partial")
    shutil.rmtree(partial / "apt-cache", ignore_errors=True)
    scan = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "."],
        cwd=partial,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    (partial / "Packages").write_text(scan.stdout)
    shutil.rmtree(debs, ignore_errors=True)
    partial.rename(debs)


def _python_requirements() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    build: list[str] = pyproject["build-system"]["requires"]
    runtime: list[str] = pyproject["project"]["dependencies"]
    return [*build, *runtime]


def _wheelhouse(wheels: Path) -> None:
    """The build backend and the runtime dependencies as wheels, from the host's pip."""
    shutil.rmtree(wheels, ignore_errors=True)
    argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels)]
    done = subprocess.run(
        [*argv, *_python_requirements()], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheels / ".complete").touch()


def build(
    podman: Podman, offline: Offline, containerfile: Path, tag: str
) -> subprocess.CompletedProcess[str]:
    """``podman build`` of the project root with the offline sources mounted.

    ``--format docker`` keeps the HEALTHCHECK (the OCI format has none).
    """
    return podman.run(
        "build",
        *("--format", "docker", "--network", "none", "--from", offline.base),
        *offline.build_volumes(),
        *("-f", str(containerfile), "-t", tag, str(ROOT)),
        timeout=900,
    )
