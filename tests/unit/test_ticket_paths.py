"""What ``sloopctl post`` sends for a path, on real repositories: relative to the root of
the repository the file is in, with its digest (docs/tickets.md, "Posting from another
path")."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from sloopctl import ticket_paths

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=ENV)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True, env=ENV)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "c"], check=True, env=ENV)
    return path


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    ticket_paths.outermost_root.cache_clear()


def test_a_path_goes_relative_to_its_repository_with_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = repo(tmp_path / "project", {"tickets/a.md": "# A\n"})
    monkeypatch.chdir(project / "tickets")
    assert ticket_paths.posted("a.md") == ("tickets/a.md", digest("# A\n"))
    assert ticket_paths.posted(str(project / "tickets" / "a.md"))[0] == "tickets/a.md"


def test_a_project_inside_a_home_kept_in_git_is_its_own(tmp_path: Path) -> None:
    home = repo(tmp_path / "home", {".bashrc": "x\n"})
    project = repo(home / "src" / "project", {"tickets/b.md": "# B\n"})
    assert ticket_paths.posted(str(project / "tickets" / "b.md"))[0] == "tickets/b.md"


def test_a_submodules_file_is_its_superprojects(tmp_path: Path) -> None:
    library = repo(tmp_path / "library", {"tickets/c.md": "# C\n"})
    outer = repo(tmp_path / "outer", {"README.md": "hi\n"})
    subprocess.run(
        ["git", "-C", str(outer), "-c", "protocol.file.allow=always", "submodule", "add",
         "-q", str(library), "lib"],
        check=True, env=ENV, capture_output=True,
    )  # fmt: skip
    assert ticket_paths.posted(str(outer / "lib" / "tickets" / "c.md")) == (
        "lib/tickets/c.md",
        digest("# C\n"),
    )


def test_outside_any_repository_or_no_regular_file_goes_as_before(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "d.md").write_text("# D\n")
    assert ticket_paths.posted(str(loose / "d.md")) == (str(loose.resolve() / "d.md"), None)
    project = repo(tmp_path / "project", {"tickets/keep.md": "x\n"})
    os.mkfifo(project / "tickets" / "pipe.md")  # never opened for reading blocking
    assert ticket_paths.posted(str(project / "tickets" / "pipe.md")) == ("tickets/pipe.md", None)
    missing = ticket_paths.posted(str(project / "nowhere" / "e.md"))
    assert missing == (str(project.resolve() / "nowhere" / "e.md"), None)
