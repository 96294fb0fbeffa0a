"""What a sandboxed child is shown: binds that bwrap can make, none that nest."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sloopd.core.paths import Layout
from sloopd.runs.launch import SandboxLauncher
from sloopd.runs.stage_io import Limits, StageLaunch
from tests.support.fakes import FakeChild, FakeProcessGroups

LIMITS = Limits(timeout_ms=60_000, max_log_lines=100, max_log_bytes=1 << 20)


def launcher(tmp_path: Path) -> SandboxLauncher[FakeChild]:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    layout = Layout(repo=repo, state_dir=repo / ".git" / "sloop", socket_dir=tmp_path / "s")
    return SandboxLauncher(layout, FakeProcessGroups())


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
    repo = sl.layout.repo
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
