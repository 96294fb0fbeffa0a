"""Session fixtures of the deployment tests: the private podman, the offline inputs,
the daemon's image and the systemd host's image, each made once per session.

The images are rebuilt every session (podman's layer cache makes an unchanged build
quick), so they are always the checkout's; the debootstrapped base, the apt
repository and the wheelhouse are cached across sessions (``engine.cache_root()``).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy import engine, offline
from tests.deploy.engine import Podman

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("podman", "runc", "debootstrap", "dpkg-scanpackages", "setpriv", "unshare")


def package_version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


@pytest.fixture(scope="session")
def podman() -> Podman:
    engine.require_tools(TOOLS)
    if os.geteuid() != 0:
        engine.unavailable("rootful podman needs root (the tests run as another user)")
    created = Podman.create(engine.cache_root() / "podman")
    created.remove_leftovers()
    return created


@pytest.fixture(scope="session")
def offline_inputs(podman: Podman) -> offline.Offline:
    prepared = offline.prepare(podman, engine.cache_root())
    engine.probe(podman, prepared.base)
    return prepared


@pytest.fixture(scope="session")
def daemon_image(podman: Podman, offline_inputs: offline.Offline) -> str:
    """deploy/container/Containerfile built as it is, tagged as compose.yaml names it."""
    tag = f"localhost/sloopd:{package_version()}"
    offline.build(podman, offline_inputs, ROOT / "deploy/container/Containerfile", tag)
    return tag


@pytest.fixture(scope="session")
def unit_image(podman: Podman, offline_inputs: offline.Offline) -> Iterator[str]:
    tag = f"localhost/{engine.session_name('unit-host')}"
    containerfile = Path(__file__).with_name("unit-host.Containerfile")
    offline.build(podman, offline_inputs, containerfile, tag)
    yield tag
    podman.run("rmi", tag, check=False)
