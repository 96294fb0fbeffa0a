"""Whether an agent's CLI resolves inside the sandbox (issue 24, item 6).

The CLIs are laid out as npm lays them out (a ``bin`` symlink into the package, a
``#!/usr/bin/env node`` script) in a temporary folder, which the sandbox hides like
every folder outside ``/usr``, ``/opt`` and the rest of its allowlist.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sloopd.core import cli_sight, config
from sloopd.flows.presets import CODEX
from sloopd.proc import sight
from tests.support.gitrepo import commit, git, make_repo


def npm_prefix(root: Path, name: str, shebang: str = "#!/usr/bin/env sh\n") -> Path:
    """``npm -g --prefix root``: root/bin/name -> ../lib/node_modules/name/cli.js."""
    package = root / "lib" / "node_modules" / name
    package.mkdir(parents=True)
    script = package / "cli.js"
    script.write_text(shebang + "exit 0\n")
    script.chmod(0o755)
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin" / name).symlink_to(os.path.relpath(script, root / "bin"))
    return root / "bin"


def test_a_cli_in_a_hidden_folder_is_named_with_the_mount_that_shows_it(tmp_path: Path) -> None:
    bins = npm_prefix(tmp_path / ".local", "claude")
    path = f"{bins}:/usr/bin:/bin"
    found = sight.unseen("claude", path, ())
    assert found is not None
    assert found.path == str(bins / "claude")
    assert "claude is not visible in the sandbox" in found.problem
    assert str((bins / "claude").resolve()) in found.problem
    assert f'add "{tmp_path / ".local"}" to agent.ro_mounts' in found.problem
    # Mounted at its own path, it resolves; a ~/ mount (shown under the run's HOME) does not.
    assert sight.unseen("claude", path, (str(tmp_path / ".local"),)) is None
    assert sight.unseen("claude", path, ("~/.local",)) is not None
    assert sight.unseen("claude", path, (), sandboxed=False) is None


def test_a_hidden_interpreter_is_named_too(tmp_path: Path) -> None:
    """nvm: node and the CLI share the version's prefix, which the sandbox hides."""
    prefix = tmp_path / "nvm" / "v22"
    bins = npm_prefix(prefix, "codex", "#!/usr/bin/env node\n")
    node = bins / "node"
    node.write_text("#!/bin/sh\n")
    node.chmod(0o755)
    found = sight.unseen("codex", f"{bins}:/usr/bin", ())
    assert found is not None
    assert f"its interpreter {node}" in found.problem
    assert f'add "{prefix}" to agent.ro_mounts' in found.problem


def test_a_cli_on_no_path_is_said_so() -> None:
    found = sight.unseen("no-such-cli-here", "/usr/bin:/bin", ())
    assert found is not None
    assert found.path is None
    assert "is not on the daemon's PATH" in found.problem


def test_a_system_install_is_visible() -> None:
    assert sight.unseen("sh", "/usr/bin:/bin", ()) is None


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("sh: 1: exec: claude: not found", ["claude"]),
        ("bash: line 1: gemini: command not found", ["gemini"]),
        ("/usr/bin/env: \u2018node\u2019: No such file or directory", ["node"]),
        ("/usr/bin/env: 'node': No such file or directory", ["node"]),
        ("the file was not found", []),
        ("Error: model not found", []),
    ],
)
def test_the_programs_a_shell_could_not_find(line: str, names: list[str]) -> None:
    assert sight.not_found(line) == names


def test_exit_127_is_explained_from_the_shells_words_or_the_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bins = npm_prefix(tmp_path / "prefix", "codex")
    monkeypatch.setenv("PATH", f"{bins}:/usr/bin:/bin")
    said = ["sh: 1: exec: codex: not found"]
    hint = cli_sight.explain_exit_127(said, ("sh", "-c", "x"), (), sandboxed=True)
    assert hint is not None
    assert "codex is not visible in the sandbox" in hint
    # Nothing printed: the preset's CLI is the program tried.
    assert cli_sight.explain_exit_127([], CODEX.command, (), sandboxed=True) == hint
    # A command of its own that exits 127 by itself is told nothing more.
    assert cli_sight.explain_exit_127([], ("sh", "-c", "exit 127"), (), sandboxed=True) is None
    mounted = (str(tmp_path / "prefix"),)
    assert cli_sight.explain_exit_127(said, CODEX.command, mounted, sandboxed=True) is None


def test_the_configured_presets_are_checked_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bins = npm_prefix(tmp_path / "prefix", "codex")
    monkeypatch.setenv("PATH", f"{bins}:/usr/bin:/bin")
    document = {
        "agent": {"preset": "codex"},
        "flows": {
            "default": {
                "stages": [
                    {"name": "implement", "action": "agent"},
                    {"name": "again", "action": "agent", "agent": "codex"},
                    {"name": "example", "action": "agent", "agent": "example"},
                ]
            }
        },
    }
    rows = cli_sight.configured_unseen(config.parse(document))
    assert [(r["preset"], r["cli"], r["path"]) for r in rows] == [
        ("codex", "codex", str(bins / "codex"))
    ]
    document["agent"] = {"preset": "codex", "ro_mounts": [str(tmp_path / "prefix")]}
    assert cli_sight.configured_unseen(config.parse(document)) == []
    assert cli_sight.configured_unseen(config.parse({"sandbox": "none", **document})) == []


GEMINI_STAGES = {
    "flows": {
        "default": {
            "stages": [
                {"name": "implement", "action": "agent", "agent": "example"},
                {"name": "review", "action": "agent", "agent": "gemini"},
            ]
        }
    }
}


def test_a_file_on_main_the_gemini_preset_refuses_is_named_at_start(tmp_path: Path) -> None:
    """Issue 34, item 9: a committed .env makes every gemini stage fail; the daemon says so."""
    repo = make_repo(tmp_path)
    main = "main"
    settings = config.parse({"repo": {"main": main}, **GEMINI_STAGES})
    commit(repo, {"README.md": "hi\n"})
    assert cli_sight.refused_by_main(settings, repo) == []

    commit(repo, {".gemini/settings.json": "{}\n"})
    rows = cli_sight.refused_by_main(settings, repo)
    assert [(r["preset"], r["cli"], r["path"], r["file"]) for r in rows] == [
        ("gemini", "gemini", None, ".gemini/settings.json")
    ]
    commit(repo, {".env": "KEY=1\n"})
    (row,) = cli_sight.refused_by_main(settings, repo)
    assert row["file"] == ".gemini/settings.json"  # one row per preset, its first file
    git(repo, "rm", "-q", "-r", ".gemini")
    git(repo, "commit", "-q", "-m", "no settings")
    (row,) = cli_sight.refused_by_main(settings, repo)
    assert row["file"] == ".env"
    assert row["problem"].startswith(f"{main} holds .env, and the gemini preset refuses")
    assert "every gemini stage will fail 'refused'" in row["problem"]
    assert row in cli_sight.checked(settings, repo)

    # Only what main holds counts (an ignored .env of the main checkout is in no run's),
    # only presets the configuration runs, and a main that cannot be read says nothing.
    other = config.parse({"repo": {"main": main}, "agent": {"preset": "example"}})
    assert cli_sight.refused_by_main(other, repo) == []
    missing = config.parse({"repo": {"main": "no-such-branch"}, **GEMINI_STAGES})
    assert cli_sight.refused_by_main(missing, repo) == []
    assert cli_sight.refused_by_main(settings, tmp_path / "not-a-repo") == []
