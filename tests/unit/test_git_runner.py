"""One git runner: the only module that names the repository-locating variables, and
the only one that starts git (``sloopd/git/runner.py``).

Three runners had drifted: two scrubbed four ``GIT_*`` variables, one nine, so the
call that moves ``main`` honoured an inherited ``GIT_OBJECT_DIRECTORY``.  The source
checks below keep a fourth copy from appearing; the behaviour tests show the one
list reaching every caller.
"""

from __future__ import annotations

import ast
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sloopd.git import ops as gitops
from sloopd.git import runner
from sloopd.util import procfs
from tests.support.daemon import wait_until
from tests.support.gitrepo import commit, git, head, make_repo

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "sloopd" / "git" / "runner.py"
# The bundled example agent is an agent, not the daemon: it runs its own git, as any
# agent does, inside the sandbox.
NOT_THE_DAEMON = (ROOT / "sloopd" / "examples",)


def daemon_sources() -> list[Path]:
    return [
        path
        for path in sorted((ROOT / "sloopd").rglob("*.py"))
        if not any(path.is_relative_to(skip) for skip in NOT_THE_DAEMON)
    ]


def string_constants(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def git_argv_literals(path: Path) -> Iterator[int]:
    """Lines of list or tuple literals that start with ``"git"``: a git command line."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == "git":
                yield node.lineno


def process_starters(path: Path) -> Iterator[int]:
    """Lines that start a process: subprocess, asyncio's exec, or the bounded tool runner."""
    starters = {"Popen", "run", "create_subprocess_exec", "create_subprocess_shell", "call"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in starters
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in {"subprocess", "asyncio", "subproc"}
        ):
            yield node.lineno


def test_one_module_names_the_repository_locating_variables() -> None:
    named = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in daemon_sources()
        if path != RUNNER
        for line, value in string_constants(path)
        if value in runner.REPO_LOCATING_VARS
    }
    assert named == set()
    assert len(runner.REPO_LOCATING_VARS) == len(set(runner.REPO_LOCATING_VARS)) == 9


def test_git_command_lines_are_built_only_in_the_git_layer() -> None:
    git_layer = ROOT / "sloopd" / "git"
    outside = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in daemon_sources()
        if not path.is_relative_to(git_layer)
        for line in git_argv_literals(path)
    }
    assert outside == set()


def test_inside_the_git_layer_only_the_runner_starts_a_process() -> None:
    starters = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "sloopd" / "git").rglob("*.py"))
        if path != RUNNER
        for line in process_starters(path)
    }
    assert starters == set()
    assert list(process_starters(RUNNER)), "the checker must see the runner's own starts"


def test_the_checkers_see_what_they_look_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import subprocess\n"
        "X = 'GIT_NAMESPACE'\n"
        "subprocess.run(['git', 'status'])\n"
        "argv = ('git', '-C', 'x')\n"
    )
    assert [v for _, v in string_constants(sample) if v in runner.REPO_LOCATING_VARS] == [
        "GIT_NAMESPACE"
    ]
    assert sorted(git_argv_literals(sample)) == [3, 4]
    assert list(process_starters(sample)) == [3]


def test_the_environment_drops_every_repository_locating_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in runner.REPO_LOCATING_VARS:
        monkeypatch.setenv(var, "/elsewhere")
    monkeypatch.setenv("SLOOP_KEPT", "1")
    env = runner.environment({"GIT_OPTIONAL_LOCKS": "0"})
    assert not set(runner.REPO_LOCATING_VARS) & env.keys()
    assert env["SLOOP_KEPT"] == "1"
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["GIT_OPTIONAL_LOCKS"] == "0"


@pytest.fixture
def repo(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="gr", dir="/tmp"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("HOME", str(root))
    try:
        yield make_repo(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    "variable", ["GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_DIR"]
)
def test_ff_only_ignores_an_inherited_repository_locating_variable(
    repo: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """0.7.0's ff_only scrubbed four variables: with GIT_OBJECT_DIRECTORY inherited (a
    daemon started from a hook of another repository) it read another object store
    and refused to merge ("no branch main")."""
    work = repo.parent / "w"
    git(repo, "worktree", "add", "--quiet", "-b", "sloop/t/1", str(work), "main")
    tip = commit(work, {"c.txt": "c\n"})
    git(repo, "worktree", "remove", "--force", str(work))
    (repo.parent / "other").mkdir()
    elsewhere = make_repo(repo.parent / "other")
    monkeypatch.setenv(variable, str(elsewhere / ".git" / "objects"))
    if variable == "GIT_DIR":
        monkeypatch.setenv(variable, str(elsewhere / ".git"))

    result = asyncio.run(gitops.ff_only(repo, tip, "main"))

    assert result.ok, result.reason
    monkeypatch.delenv(variable)
    assert head(repo, "main") == tip
    assert head(elsewhere, "main") != tip


# --- interrupt: an abort or a stopping daemon kills git and its hooks at once ------------


def _gone(pid: int) -> bool:
    stat = procfs.stat(pid)
    return stat is None or stat.state == "Z"


def test_an_interrupt_kills_the_tool_and_what_it_started(tmp_path: Path) -> None:
    """A hook that hangs (here a shell's child) dies with its git when the caller's
    interrupt is set, long before the deadline; the caller is told ``Interrupted``."""
    pidfile = tmp_path / "hook.pid"
    script = f"sleep 600 & echo $! > {pidfile}; wait"

    async def interrupted_once_the_hook_runs() -> None:
        interrupt = asyncio.Event()

        async def interrupt_when_started() -> None:
            while not pidfile.exists() or not pidfile.read_text().strip():
                await asyncio.sleep(0.01)
            interrupt.set()

        setter = asyncio.ensure_future(interrupt_when_started())
        try:
            with pytest.raises(runner.Interrupted):
                # The guard is far beyond the kill and far short of the deadline.
                await asyncio.wait_for(
                    runner.run(["sh", "-c", script], timeout=600, interrupt=interrupt), 60
                )
        finally:
            setter.cancel()

    asyncio.run(interrupted_once_the_hook_runs())
    hook = int(pidfile.read_text())
    wait_until(lambda: _gone(hook), timeout=10)


def test_a_tool_interrupted_before_it_starts_is_never_started(tmp_path: Path) -> None:
    touched = tmp_path / "ran"

    async def already_interrupted() -> None:
        interrupt = asyncio.Event()
        interrupt.set()
        with pytest.raises(runner.Interrupted):
            await runner.run(["touch", str(touched)], timeout=60, interrupt=interrupt)

    asyncio.run(already_interrupted())
    assert not touched.exists()


def test_a_tool_that_finishes_keeps_its_result_under_an_interrupt_never_set() -> None:
    async def finished() -> runner.Finished:
        return await runner.run(["sh", "-c", "echo out"], timeout=60, interrupt=asyncio.Event())

    done = asyncio.run(finished())
    assert (done.returncode, done.stdout) == (0, "out\n")


def test_a_tool_gets_the_loops_umask_though_started_while_it_is_narrowed() -> None:
    """Tools start from a thread of their own; should the process umask be narrowed for
    a moment (``bound_private`` did before 0.9.0), a tool started in that moment must
    still get the umask the loop had when it asked (with 0177 its folders could not be
    entered)."""
    before = os.umask(0o022)
    os.umask(before)

    async def started_in_the_narrow_moment() -> str:
        task = asyncio.ensure_future(runner.run(["sh", "-c", "umask"], timeout=60))
        await asyncio.sleep(0)  # the run has asked: its start waits for the other thread
        os.umask(0o177)
        try:
            time.sleep(0.3)  # the loop holds the narrow umask, as around a bind
        finally:
            os.umask(before)
        return (await task).stdout.strip()

    assert int(asyncio.run(started_in_the_narrow_moment()), 8) == before


# --- no global or system config: one environment for every daemon git ----------------


def test_one_module_names_the_variables_that_keep_operator_config_out() -> None:
    named = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in daemon_sources()
        if path != RUNNER
        for line, value in string_constants(path)
        if value in runner.NO_OPERATOR_CONFIG
    }
    assert named == set()


@pytest.fixture
def operator_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A global config of the daemon user's, as the environment names it."""
    config = tmp_path / "gitconfig"
    config.write_text(
        "[user]\n\tname = Operator\n\temail = op@example.invalid\n"
        "[safe]\n\tdirectory = /srv/trusted\n\tdirectory = /srv/also\n"
        '[filter "evil"]\n\tsmudge = touch /nonexistent/marker; cat\n'
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    runner._trusted_directories.cache_clear()
    try:
        yield config
    finally:
        runner._trusted_directories.cache_clear()


def test_every_host_git_reads_no_global_or_system_config(
    operator_config: Path, tmp_path: Path
) -> None:
    env = runner.environment()
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["GIT_ATTR_NOSYSTEM"] == "1"
    repo = make_repo(tmp_path)
    done = runner.run_blocking(runner.git(repo, "config", "--get", "filter.evil.smudge"))
    assert (done.returncode, done.stdout) == (1, "")


def test_the_operators_safe_directories_are_carried_after_inherited_settings(
    operator_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "safe.directory")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "*")
    env = runner.environment()
    assert env["GIT_CONFIG_COUNT"] == "3"
    carried = [(env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"]) for n in range(3)]
    assert carried == [
        ("safe.directory", "*"),
        ("safe.directory", "/srv/trusted"),
        ("safe.directory", "/srv/also"),
    ]


def test_the_identity_is_the_one_thing_read_from_the_operators_config(
    operator_config: Path, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path, identity=False)
    assert runner.config_value(repo, "user.name") == "Operator"
    assert runner.config_value(repo, "user.email") == "op@example.invalid"
    assert runner.config_value(repo, "user.nothing") == ""
