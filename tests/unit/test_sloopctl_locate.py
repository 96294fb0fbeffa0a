"""Finding the socket, and `sloopctl daemon`, in throwaway git repositories."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from sloopctl import locate, start
from sloopctl.cli import main
from sloopd.wire import api

PACKAGE = Path(__file__).resolve().parents[2] / "sloopctl"


@pytest.fixture
def repo() -> Iterator[locate.Repo]:
    top = Path(tempfile.mkdtemp(prefix="r", dir="/tmp")).resolve()
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    (top / "sub").mkdir()
    yield locate.Repo(top, top / ".git")
    shutil.rmtree(top, ignore_errors=True)


def test_find_repo_from_a_subdirectory(repo: locate.Repo) -> None:
    assert locate.find_repo(repo.toplevel / "sub") == repo
    assert locate.find_repo(Path("/")) is None


def test_socket_order_option_env_daemon_json_default(repo: locate.Repo) -> None:
    sub = repo.toplevel / "sub"
    env = {"SLOOP_OPERATOR_SOCKET": "/e.sock", "SLOOP_SOCKET_DIR": "/sd"}
    assert locate.operator_endpoint("/o.sock", env, sub).socket == Path("/o.sock")
    assert locate.operator_endpoint(None, env, sub).socket == Path("/e.sock")
    env = {"SLOOP_SOCKET_DIR": "/sd"}
    default = locate.operator_endpoint(None, env, sub)
    assert default.socket == Path("/sd") / api.OPERATOR_SOCKET_NAME
    assert default.source == "default"
    repo.state_dir.mkdir()
    info = repo.state_dir / api.DAEMON_INFO_NAME
    info.write_text("{not json")
    assert locate.operator_endpoint(None, env, sub).socket == default.socket
    info.write_bytes(orjson.dumps({"socket": "/run/d.sock", "pid": 1}))
    assert locate.operator_endpoint(None, env, sub).socket == Path("/run/d.sock")


def test_outside_a_repository_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(locate.LocateError, match="--socket"):
        locate.operator_endpoint(None, {}, Path("/"))


def test_show_inside_a_run_goes_to_the_worker_socket() -> None:
    env = {"SLOOP_SOCKET": "/w.sock", "SLOOP_TOKEN": "t", "SLOOP_OPERATOR_SOCKET": "/o.sock"}
    assert locate.show_endpoint(None, env) == locate.Endpoint(Path("/w.sock"), "t", "worker")
    assert locate.show_endpoint("/x.sock", env).token is None
    half = {"SLOOP_SOCKET": "/w.sock", "SLOOP_OPERATOR_SOCKET": "/o.sock"}
    assert locate.show_endpoint(None, half).socket == Path("/o.sock")


def test_start_daemon_reads_the_first_line(repo: locate.Repo) -> None:
    script = "import sys; print('/tmp/fake.sock', flush=True); print('boot', file=sys.stderr)"
    started = start.start_daemon(repo, argv=[sys.executable, "-c", script])
    assert started.socket == "/tmp/fake.sock"
    assert started.process.wait(timeout=10) == 0
    assert "boot" in (repo.state_dir / start.LOG_NAME).read_text()


def test_start_daemon_failure_carries_the_log_tail(repo: locate.Repo) -> None:
    script = "import sys; print('bad sloop.toml: unknown key x', file=sys.stderr); sys.exit(3)"
    with pytest.raises(start.StartError, match="status 3") as caught:
        start.start_daemon(repo, argv=[sys.executable, "-c", script])
    assert "unknown key x" in caught.value.log_tail


def test_daemon_command_reports_a_failed_start(
    repo: locate.Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = "import sys; print('cannot lock store', file=sys.stderr); sys.exit(1)"
    monkeypatch.setattr(
        start, "daemon_argv", lambda repo, socket_dir: [sys.executable, "-c", script]
    )
    monkeypatch.chdir(repo.toplevel)
    env: dict[str, str | None] = {
        "SLOOP_OPERATOR_SOCKET": None,
        "SLOOP_SOCKET_DIR": str(repo.toplevel / "nosock"),
    }
    result = CliRunner().invoke(main, ["daemon"], env=env)
    assert result.exit_code == 1
    assert "cannot lock store" in result.stderr


def test_sloopctl_imports_nothing_from_sloopd_but_api() -> None:
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                packages = ("sloopd", "sloopd.wire")
                names = names[:1] if node.module not in packages else names[1:]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] == "sloopd":
                    assert name == "sloopd.wire.api", f"{path.name} imports {name}"


def test_startup_imports_stay_light() -> None:
    code = "import sys, sloopctl.cli; print(' '.join(sorted(sys.modules)))"
    # Without coverage's variables: `make coverage` starts coverage (and its sqlite3)
    # in every subprocess, which is not what sloopctl itself imports.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
        check=True,
        env=env,
    )
    loaded = set(done.stdout.split())
    assert not loaded & {"asyncio", "sqlite3", "apsw", "uvloop", "sloopctl.start"}
    schema = {"sloopd.wire", "sloopd.wire.api"}
    assert not {m for m in loaded if m.startswith("sloopd.") and m not in schema}


def test_the_token_comes_from_its_file_when_not_in_the_environment(tmp_path: Path) -> None:
    """``[agent] token_env = false``: only SLOOP_TOKEN_FILE names the token (0.8.0)."""
    token_file = tmp_path / "token"
    token_file.write_text("s3cret")
    env = {"SLOOP_SOCKET": "/w.sock", "SLOOP_TOKEN_FILE": str(token_file)}
    assert locate.in_run(env)
    assert locate.worker_endpoint(None, env).token == "s3cret"
    # The environment's token wins when both are there (what 0.7.0 agents read).
    assert locate.worker_token({**env, "SLOOP_TOKEN": "from-env"}) == "from-env"


@pytest.mark.parametrize("content", [None, "", "x" * 5000])
def test_a_missing_empty_or_oversized_token_file_is_no_token(
    tmp_path: Path, content: str | None
) -> None:
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
    env = {"SLOOP_SOCKET": "/w.sock", "SLOOP_TOKEN_FILE": str(token_file)}
    assert not locate.in_run(env)
    with pytest.raises(locate.LocateError, match="SLOOP_TOKEN_FILE"):
        locate.worker_endpoint(None, env)
