"""What a sandboxed child is shown and started with: binds that bwrap can make, none that
nest, and nothing but what its ``StageLaunch`` says (over fake process groups)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sloopd.compose import hidden_from_children
from sloopd.core.paths import Layout
from sloopd.proc.launchers import ChildLauncher, SandboxPlaces
from sloopd.proc.stage_io import LaunchRefused, Limits, StageLaunch
from tests.support.fakes import FakeChild, FakeProcessGroups

LIMITS = Limits(timeout_ms=60_000, max_log_lines=100, max_log_bytes=1 << 20)


def launcher(tmp_path: Path) -> ChildLauncher[FakeChild]:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    layout = Layout(repo=repo, state_dir=repo / ".git" / "sloop", socket_dir=tmp_path / "s")
    places = SandboxPlaces(hidden_from_children(layout), repo / ".git" / "objects")
    return ChildLauncher(FakeProcessGroups(), places)


def test_a_named_file_inside_a_named_folder_gets_no_bind_of_its_own(tmp_path: Path) -> None:
    # An installation under /tmp (a CI clone): the folder and a program inside it.
    tool = tmp_path / "tool"
    (tool / "bin").mkdir(parents=True)
    program = tool / "bin" / "agent"
    program.write_text("#!/bin/sh\n")
    request = StageLaunch(
        owner="t",
        commit="0" * 40,
        argv=(str(program), "--config", str(tool)),
        checkout=tmp_path / "co",
        home=tmp_path / "home",
        limits=LIMITS,
    )
    spec = launcher(tmp_path).spec(request, {"PATH": "/usr/bin:/bin"})
    assert tool in spec.visible_paths
    assert program not in spec.visible_paths
    for path in spec.visible_paths:
        assert not any(other in path.parents for other in spec.visible_paths), path


def test_the_repository_and_the_state_directory_are_never_shown(tmp_path: Path) -> None:
    sl = launcher(tmp_path)
    repo = tmp_path / "repo"
    request = StageLaunch(
        owner="t",
        commit="0" * 40,
        argv=("/bin/true", str(repo), str(repo / ".git" / "config")),
        checkout=tmp_path / "co",
        home=tmp_path / "home",
        limits=LIMITS,
    )
    spec = sl.spec(request, {"PATH": "/usr/bin:/bin"})
    assert all(
        repo.resolve() not in [p.resolve(), *p.resolve().parents] for p in spec.visible_paths
    )
    assert repo.resolve() in spec.hide


def _launch(tmp_path: Path, **fields: Any) -> StageLaunch:
    values: dict[str, Any] = {
        "owner": "R1/implement#1",
        "commit": "0" * 40,
        "argv": ("/bin/true", "--go"),
        "checkout": tmp_path / "co",
        "home": tmp_path / "home",
        "limits": LIMITS,
        **fields,
    }
    return StageLaunch(**values)


def test_a_sandboxed_child_is_started_from_its_launch_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOWED_KEY", "passed")
    monkeypatch.setenv("OPERATOR_SECRET", "kept")
    login = tmp_path / "login.json"
    login.write_text("{}")
    sl = launcher(tmp_path)
    launch = _launch(
        tmp_path,
        variables={"SLOOP_STAGE": "implement"},
        passed=("ALLOWED_KEY",),
        ro_mounts=(str(login),),
        token="t0k",
        worker_socket=tmp_path / "w.sock",
    )
    seen: list[str] = []

    async def scenario() -> int:
        child = await sl.start(launch, lambda stream, texts, split: seen.extend(texts))
        return (await child.end()).exit_code

    assert asyncio.run(scenario()) == 0
    groups = sl.groups
    assert isinstance(groups, FakeProcessGroups)
    (spawn,) = groups.spawns
    assert spawn.argv == ["/bin/true", "--go"]
    assert spawn.owner == "R1/implement#1"
    assert spawn.env["ALLOWED_KEY"] == "passed"
    assert "OPERATOR_SECRET" not in spawn.env
    # Paths as the child sees them inside the sandbox, not as the host has them.
    assert spawn.env["SLOOP_WORKTREE"] == "/sloop/work"
    assert spawn.env["HOME"] == "/sloop/home"
    assert spawn.env["SLOOP_SOCKET"] == "/sloop/worker.sock"
    assert spawn.env["SLOOP_TOKEN"] == "t0k"
    assert spawn.sandboxed
    assert spawn.command[0] == "bwrap"
    assert str(login) in spawn.command
    assert spawn.command[-2:] == ["/bin/true", "--go"]


def test_a_mount_that_would_expose_the_repository_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    sl = launcher(tmp_path)
    launch = _launch(tmp_path, rw_mounts=(str(tmp_path / "repo"),))

    async def scenario() -> None:
        await sl.start(launch, lambda stream, texts, split: None)

    with pytest.raises(LaunchRefused, match="would expose"):
        asyncio.run(scenario())
    groups = sl.groups
    assert isinstance(groups, FakeProcessGroups)
    assert groups.spawns == []
