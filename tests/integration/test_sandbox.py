"""The bwrap sandbox, attacked from inside: processes, mounts, hidden paths, env, network.

Each test runs a real ``bwrap`` built by ``sandbox.command`` and checks, from inside or from
the host, one promise of the module docstring.  Python inside the sandbox is this test's
base interpreter, made visible read-only (it may live under the hidden home).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from sloopd.git import checkout
from sloopd.proc import sandbox
from sloopd.proc.sandbox import CHECKOUT_PATH, Mount, SandboxSpec
from tests.support.gitrepo import commit, git, head, make_repo

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

PYTHON = os.path.realpath(sys.executable)
PYTHON_HOME = Path(sys.base_prefix)
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


@dataclass
class Box:
    root: Path
    spec: SandboxSpec

    def argv(self, argv: list[str], **changes: Any) -> list[str]:
        spec = replace(self.spec, **changes)
        return sandbox.command(spec, argv)

    def run(self, argv: list[str], **changes: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(argv, **changes), capture_output=True, text=True, timeout=60, check=False
        )

    def py(self, code: str, **changes: Any) -> subprocess.CompletedProcess[str]:
        return self.run([PYTHON, "-I", "-c", textwrap.dedent(code)], **changes)

    def sh(self, script: str, **changes: Any) -> subprocess.CompletedProcess[str]:
        return self.run(["sh", "-c", script], **changes)


@pytest.fixture
def box(tmp_path: Path) -> Box:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    spec = SandboxSpec(
        checkout=work, home=home, visible_paths=(PYTHON_HOME,), env={**ENV, "HOME": "/sloop/home"}
    )
    return Box(tmp_path, spec)


def host_pids_running(argv: list[str]) -> list[int]:
    """Host pids whose command line is exactly ``argv``."""
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == wanted:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_for(argv: list[str]) -> int:
    """The host pid of the one process running ``argv``, once it has exec'd (up to 10 s)."""
    deadline = time.monotonic() + 10
    while not (found := host_pids_running(argv)) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(found) == 1, f"expected one process running {argv}, found {found}"
    return found[0]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def until_dead(pids: list[int], timeout: float) -> list[int]:
    """Wait up to ``timeout`` for ``pids`` to die; those still alive."""
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.005)
    return [pid for pid in pids if alive(pid)]


def unique_sleep() -> list[str]:
    """A ``sleep`` whose command line no other process has, to find it on the host."""
    return ["sleep", f"{random.randint(10**6, 10**7)}.{random.randint(1, 999)}"]


def daemonise(argv: list[str]) -> str:
    """Shell lines starting ``argv`` in its own session, deaf to SIGTERM and SIGHUP, and
    waiting until it runs."""
    inner = f"trap '' TERM HUP; touch /tmp/started; exec {shlex.join(argv)}"
    return (
        f"setsid sh -c {shlex.quote(inner)} </dev/null >/dev/null 2>&1 &\n"
        "while [ ! -e /tmp/started ]; do sleep 0.01; done"
    )


# --- probe ----------------------------------------------------------------------------


def test_probe_passes_here() -> None:
    assert sandbox.probe() is None


def test_probe_names_the_package_when_bwrap_is_missing(tmp_path: Path) -> None:
    message = sandbox.probe(str(tmp_path / "no-such-bwrap"))
    assert message is not None
    assert "install the bubblewrap package" in message


def fake_bwrap(tmp_path: Path, error: str) -> str:
    script = tmp_path / "bwrap"
    script.write_text(f"#!/bin/sh\necho {shlex.quote(error)} >&2\nexit 1\n")
    script.chmod(0o755)
    return str(script)


def test_probe_explains_refused_user_namespaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "_is_root", lambda: False)
    error = "bwrap: No permissions to creating new namespace, likely because the kernel does not"
    message = sandbox.probe(fake_bwrap(tmp_path, error))
    assert message is not None
    for needle in ("kernel.unprivileged_userns_clone", "user.max_user_namespaces", "seccomp"):
        assert needle in message
    assert "--security-opt" in message
    assert message.count(".") >= 1


def test_probe_explains_a_proc_mount_refused_in_a_container(tmp_path: Path) -> None:
    error = "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"
    message = sandbox.probe(fake_bwrap(tmp_path, error))
    assert message is not None
    assert "systempaths=unconfined" in message
    # 0.8.0 named only the wide options; podman's narrowest that works (issue 37).
    assert "unmask=/proc/*" in message
    assert "--privileged" not in message


# --- processes -----------------------------------------------------------------------


def test_only_its_own_processes_are_visible_in_proc(box: Box) -> None:
    secret = f"sloop-secret-{random.random()}"
    neighbour = subprocess.Popen(["sleep", "60"], env={"SLOOP_SECRET": secret})
    try:
        done = box.py(
            f"""
            import json, os
            pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
            leaked = []
            for pid in pids:
                try:
                    if {secret!r}.encode() in open(f"/proc/{{pid}}/environ", "rb").read():
                        leaked.append(pid)
                except OSError:
                    pass
            try:
                open("/proc/{neighbour.pid}/environ", "rb").read()
                neighbour = "read"
            except OSError as exc:
                neighbour = exc.errno
            cmdlines = [open(f"/proc/{{p}}/cmdline", "rb").read().split(b"\\0")[0].decode()
                        for p in pids]
            print(json.dumps([pids, leaked, neighbour, cmdlines]))
            """
        )
    finally:
        neighbour.kill()
        neighbour.wait()
    assert done.returncode == 0, done.stderr
    pids, leaked, neighbour_read, cmdlines = json.loads(done.stdout)
    assert leaked == []
    assert neighbour_read == 2  # ENOENT: that pid does not exist in this namespace
    assert pids == [1, 2], cmdlines
    assert os.path.basename(cmdlines[0]) == "bwrap", cmdlines


def test_a_setsid_grandchild_ignoring_sigterm_dies_when_the_command_exits(box: Box) -> None:
    sleeper = unique_sleep()
    # The command waits for a line on stdin, so the test sees the grandchild running first.
    script = f"{daemonise(sleeper)}\necho ready; read go; exit 0"
    proc = subprocess.Popen(
        box.argv(["sh", "-c", script]), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    grandchild = wait_for(sleeper)
    init = sandbox.init_pid(proc.pid)
    assert init is not None
    pidfd = os.pidfd_open(init)
    try:
        proc.stdin.close()
        assert proc.wait(30) == 0
        proc.stdout.close()
        # bwrap returns at once; its init dies of PDEATHSIG right after and takes the
        # namespace with it.  Its pidfd turns readable when it is gone.
        assert select.select([pidfd], [], [], 10)[0] == [pidfd]
    finally:
        os.close(pidfd)
    assert until_dead([grandchild], 10) == []


def test_killing_the_parent_of_bwrap_kills_the_whole_namespace(box: Box) -> None:
    first, second = unique_sleep(), unique_sleep()
    script = f"{daemonise(first)}\necho ready; exec {' '.join(second)}"
    parent_code = "import subprocess, sys; subprocess.Popen(sys.argv[1:]).wait()"
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code, *box.argv(["sh", "-c", script])],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    try:
        assert parent.stdout.readline().strip() == "ready"
        victims = [wait_for(first), wait_for(second)]
    finally:
        parent.kill()  # SIGKILL: no chance to clean anything up
        parent.wait()
        parent.stdout.close()
    assert until_dead(victims, 10) == []


def test_signals_reach_the_command_only_through_command_pid(box: Box) -> None:
    script = "trap 'echo $0 > /sloop/work/trapped; exit 0' TERM; touch /sloop/work/up; "
    script += "while :; do sleep 0.02; done"
    trapped = box.spec.checkout / "trapped"
    for target in ("bwrap", "command"):
        proc = subprocess.Popen(box.argv(["sh", "-c", script, target]))
        while not (box.spec.checkout / "up").exists():
            time.sleep(0.01)
        pid = sandbox.command_pid(proc.pid) if target == "command" else proc.pid
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
        code = proc.wait(30)
        (box.spec.checkout / "up").unlink()
        if target == "bwrap":
            # bwrap forwards nothing: it dies, and the namespace with it, untrapped.
            assert code == -signal.SIGTERM
            assert not trapped.exists()
        else:
            assert code == 0
            assert trapped.read_text() == "command\n"
    assert sandbox.command_pid(proc.pid) is None


def test_the_exit_status_of_the_command_is_returned(box: Box) -> None:
    assert box.sh("exit 7").returncode == 7


def test_no_capabilities_and_proc_sys_is_read_only(box: Box) -> None:
    done = box.py(
        """
        import errno, os
        caps = [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff")]
        try:
            os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY))
            print(caps[0], "writable")
        except OSError as exc:
            print(caps[0], errno.errorcode[exc.errno])
        """
    )
    assert done.returncode == 0, done.stderr
    cap, outcome = done.stdout.split()
    assert int(cap, 16) == 0
    assert outcome in ("EROFS", "EACCES")


# --- the file system ----------------------------------------------------------------


def test_the_system_is_read_only_and_the_checkout_writable(box: Box) -> None:
    done = box.sh(
        "touch /usr/sloop-x 2>/dev/null && echo usr; touch /sloop-x 2>/dev/null && echo root;"
        "touch /tmp/x /dev/shm/x && echo scratch; echo hi > /sloop/work/made && echo work;"
        "echo h > /sloop/home/made && echo home; ls /run; ls -l /bin"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == ["scratch", "work", "home"]
    assert all("docker.sock" not in ln and "dbus" not in ln for ln in lines)
    assert "usr/bin" in lines[-1]
    assert (box.spec.checkout / "made").read_text() == "hi\n"


def test_hidden_paths_appear_empty(box: Box) -> None:
    # Paths every sandbox would otherwise see read-only (system paths, wherever this
    # checkout of the tests lives): a folder, and a file.
    folder = Path("/usr/share")
    file = Path("/etc/passwd")
    assert any(folder.iterdir())
    assert file.stat().st_size > 0
    script = f"ls -A {folder}; wc -c < {file}; ls -A {Path.home()}"
    done = box.sh(script, hide=(folder, file), visible_paths=())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"], "hidden paths and the daemon's home must look empty"


def test_runtime_dir_tmp_and_home_of_the_host_are_invisible(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = "/run" if os.access("/run", os.W_OK) else None
    runtime = Path(tempfile.mkdtemp(prefix="sloop-xdg-", dir=base))
    stray = Path(tempfile.mkstemp(prefix="sloop-tmp-", dir="/tmp")[1])
    try:
        (runtime / "bus").write_text("socket stand-in")
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        done = box.sh(f"ls -A {runtime} {stray} 2>&1; ls -A /tmp /run")
    finally:
        shutil.rmtree(runtime)
        stray.unlink()
    assert "bus" not in done.stdout
    assert f"{stray}:" not in done.stdout
    assert stray.name not in done.stdout.split()


def test_only_the_allowlisted_system_is_shown(box: Box) -> None:
    """Another instance's state under /srv (docs/deploy.md's layout), /home, /var/lib and
    any directory an image adds at the top are absent; the system dirs are there."""
    made: list[Path] = []
    planted: list[Path] = []
    for top in ("/srv", "/var/lib", "/home"):
        if not os.path.isdir(top):
            os.makedirs(top)
            made.append(Path(top))
        planted.append(Path(tempfile.mkdtemp(prefix="sloop-other-", dir=top)))
        (planted[-1] / "sloop.db").write_text("another instance's store")
    extra = Path(tempfile.mkdtemp(prefix="sloop-top-", dir="/"))
    planted.append(extra)
    (extra / "secret").write_text("data")
    try:
        listed = " ".join(str(p) for p in planted)
        done = box.sh(f"for p in {listed}; do ls -A $p 2>/dev/null; done; ls /")
    finally:
        for path in planted + made:
            shutil.rmtree(path, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    shown = done.stdout.split()
    assert "sloop.db" not in shown
    assert "secret" not in shown
    assert not {"srv", "home", extra.name} & set(shown)
    assert {"usr", "etc", "bin"} <= set(shown)
    assert all(sandbox.hidden_by_default(p) for p in planted)
    assert not sandbox.hidden_by_default("/usr/bin/git")


def test_an_exposed_runtime_dir_is_masked(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/usr/share")
    argv = box.argv(["true"])
    assert any(argv[i : i + 2] == ["--tmpfs", "/usr/share"] for i in range(len(argv)))


def test_a_resolv_conf_symlink_into_run_still_resolves(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = "/run/NetworkManager/resolv.conf"
    real = os.path.realpath

    def realpath(path: Any, *args: Any, **kwargs: Any) -> str:
        return target if os.fspath(path) == "/etc/resolv.conf" else real(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", realpath)
    argv = box.argv(["true"])
    triples = [tuple(argv[i : i + 3]) for i in range(len(argv))]
    assert ("--ro-bind-try", target, target) in triples
    pairs = [tuple(argv[i : i + 2]) for i in range(len(argv))]
    assert pairs.index(("--tmpfs", "/run")) < pairs.index(("--ro-bind-try", target))
    assert ("--ro-bind", "/run", "/run") not in triples
    assert ("--ro-bind", "/", "/") not in triples


def test_environment_is_exactly_the_given_one(box: Box) -> None:
    env = {"PATH": "/usr/bin:/bin", "ONLY": "this", "SPACES": "a b\nc"}
    done = box.run(["env", "-0"], env=env)
    assert done.returncode == 0, done.stderr
    seen = dict(item.split("=", 1) for item in done.stdout.split("\0") if item)
    assert seen == {**env, "PWD": CHECKOUT_PATH}


def test_network_off_leaves_only_loopback(box: Box) -> None:
    done = box.sh("cat /proc/net/dev", network=False)
    assert done.returncode == 0, done.stderr
    names = [ln.split(":")[0].strip() for ln in done.stdout.splitlines()[2:]]
    assert names == ["lo"]


def test_resolv_conf_is_readable_with_the_network_on(box: Box) -> None:
    done = box.sh("cat /etc/resolv.conf")
    assert done.returncode == 0, done.stderr
    assert done.stdout == Path("/etc/resolv.conf").read_text()


def test_operator_mounts_prompt_and_named_paths(box: Box) -> None:
    claude, cache = box.root / "claude", box.root / "cache"
    claude.mkdir()
    cache.mkdir()
    (claude / "settings.json").write_text("{}")
    prompt, named = box.root / "prompt.md", box.root / "named.txt"
    prompt.write_text("do the thing")
    named.write_text("named")
    done = box.sh(
        "cat /sloop/home/.claude/settings.json /sloop/prompt.md " + str(named) + "; echo;"
        "touch /sloop/home/.claude/x 2>/dev/null && echo claude-writable;"
        "touch /sloop/prompt.md 2>/dev/null && echo prompt-writable;"
        f"touch {named} 2>/dev/null && echo named-writable; echo c > /cache/put && echo cached",
        ro_mounts=(Mount(claude, "/sloop/home/.claude"),),
        rw_mounts=(Mount(cache, "/cache", writable=True),),
        prompt_file=prompt,
        visible_paths=(PYTHON_HOME, named),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["{}do the thingnamed", "cached"]
    assert (cache / "put").read_text() == "c\n"


def test_the_worker_socket_is_connectable_from_inside(box: Box) -> None:
    sock = box.root / "w.sock"

    async def scenario() -> tuple[int, str, str]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            line = await reader.readline()
            writer.write(b"pong " + line)
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(serve, path=str(sock))
        code = """
            import socket
            c = socket.socket(socket.AF_UNIX)
            c.connect("/sloop/worker.sock")
            c.sendall(b"ping\\n")
            print(c.makefile().readline().strip())
            """
        argv = box.argv([PYTHON, "-I", "-c", textwrap.dedent(code)], worker_socket=sock)
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await proc.communicate()
        server.close()
        await server.wait_closed()
        return proc.returncode or 0, out.decode(), err.decode()

    code, out, err = asyncio.run(scenario())
    assert code == 0, err
    assert out.strip() == "pong ping"


def test_it_works_for_an_unprivileged_user(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix: list[str] = []
    spec = box.spec
    if os.geteuid() == 0:
        # Root takes the other path (no user namespace); try the unprivileged one as nobody,
        # in directories nobody can reach (pytest's tmp_path is private to root).
        monkeypatch.setattr(sandbox, "_is_root", lambda: False)
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        shared = Path(tempfile.mkdtemp(prefix="sloop-nobody-", dir="/tmp"))
        shared.chmod(0o755)
        spec = replace(spec, checkout=shared / "work", home=shared / "home", visible_paths=())
        for path in (spec.checkout, spec.home):
            path.mkdir()
            os.chown(path, 65534, 65534)
    script = "id -u; echo x > /sloop/work/mine && cat /sloop/work/mine"
    try:
        argv = sandbox.command(spec, ["sh", "-c", script])
        done = subprocess.run([*prefix, *argv], capture_output=True, text=True, check=False)
    finally:
        if prefix:
            shutil.rmtree(spec.checkout.parent)
    assert done.returncode == 0, done.stderr
    uid, written = done.stdout.split()
    assert written == "x"
    assert uid == str(65534 if prefix else os.geteuid())


# --- the repository -------------------------------------------------------------------


@dataclass
class Repo:
    main: Path
    work: Path
    objects: Path
    base: str


@pytest.fixture
def repo(box: Box) -> Repo:
    main = make_repo(box.root)
    base = commit(main, {"c.txt": "c\n"}, "second")
    work = box.root / "co"
    asyncio.run(checkout.create(main, work, "sloop/t1", base, timeout=30))
    objects = asyncio.run(checkout.objects_dir(main, timeout=30))
    return Repo(main, work, objects, base)


def in_repo(box: Box, repo: Repo, script: str, env: Mapping[str, str] | None = None) -> str:
    done = box.sh(
        script,
        checkout=repo.work,
        objects=repo.objects,
        hide=(repo.main / ".git",),
        env={**ENV, "HOME": "/sloop/home", **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_main_git_is_hidden_but_git_log_works_through_alternates(box: Box, repo: Repo) -> None:
    out = in_repo(
        box,
        repo,
        f"ls -A {repo.main}/.git; test -e {repo.main}/.git/HEAD && echo HEAD-visible;"
        "git log --format=%H -1; cat c.txt",
    )
    assert out.split() == ["objects", repo.base, "c"]
    # Hiding the main working tree too (its untracked files may hold secrets) still works.
    done = box.sh(
        f"ls -A {repo.main} {repo.main}/.git; git log --format=%H -1",
        checkout=repo.work,
        objects=repo.objects,
        hide=(repo.main,),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        f"{repo.main}:",
        ".git",
        f"{repo.main}/.git:",
        "objects",
        repo.base,
    ]


def test_the_main_objects_are_read_only_inside(box: Box, repo: Repo) -> None:
    out = in_repo(
        box,
        repo,
        f"touch {repo.objects}/x 2>/dev/null && echo wrote-main-objects;"
        "echo new | git hash-object -w --stdin",
    )
    sha = out.strip()
    assert len(sha) == 40, out
    assert not (repo.objects / "x").exists()
    assert not (repo.objects / sha[:2] / sha[2:]).exists()
    assert (repo.work / ".git" / "objects" / sha[:2] / sha[2:]).exists()


def test_update_ref_inside_cannot_move_the_main_branch(box: Box, repo: Repo) -> None:
    parent = head(repo.main, "HEAD~1")
    in_repo(
        box,
        repo,
        f"git update-ref refs/heads/main {parent};"
        f"git --git-dir={repo.main}/.git update-ref refs/heads/main {parent} 2>/dev/null;"
        f"mkdir -p {repo.main}/.git/refs/heads; echo {parent} > {repo.main}/.git/refs/heads/main;"
        "true",
    )
    assert head(repo.main, "refs/heads/main") == repo.base
    assert git(repo.main, "for-each-ref", "--format=%(refname)") == "refs/heads/main"


def test_the_probe_starts_whatever_the_umask_while_it_runs() -> None:
    """The probe runs in a thread while the loop may narrow the umask to 0177 (binding a
    worker socket): its folders must still be enterable, or a run is refused."""
    previous = os.umask(0o177)
    try:
        problem = sandbox.probe()
    finally:
        os.umask(previous)
    assert problem is None, problem
