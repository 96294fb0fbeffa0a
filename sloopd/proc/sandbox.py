"""Run one command of an untrusted agent inside a bubblewrap (``bwrap``) sandbox.

An agent stage executes code we do not trust on the daemon's host, so the stage sees a
private view of the machine rather than the machine itself:

* **The system, read-only, by an allowlist.**  Only the host's programs, libraries and
  configuration are bound, read-only at the same paths: ``SYSTEM_DIRS`` (``/usr``,
  ``/etc``, ``/bin``, ``/sbin``, ``/lib``, ``/lib32``, ``/lib64``, ``/libx32``,
  ``/opt``), each one that exists; a top-level symlink among them is recreated (a
  merged-usr ``/bin -> usr/bin`` keeps working).  Everything else of the host ``/`` is
  absent unless a stage names it (its command line, ``ro_mounts``, the interpreter
  ``sloopctl`` needs): ``/home``, ``/root``, ``/srv``, ``/var`` (``/var/lib`` above
  all), ``/data``, ``/mnt``, ``/media``, ``/boot`` and whatever an image adds at the
  top, so another instance's state, prompts and checkouts under ``/srv`` are not
  there to read.  Binding entries rather than ``--ro-bind / /`` leaves the sandbox's own
  root a writable tmpfs while it is assembled, so ``/sloop/...`` mount points can be
  created; it is remounted read-only last.  Fresh instances: ``/proc``, ``/dev``; empty
  tmpfs: ``/tmp``, ``/var/tmp``, ``/run`` (it holds docker.sock, the D-Bus system bus and
  ``/run/user/<uid>`` with ssh-agent, tmux and session-bus sockets; only what DNS needs is
  put back: ``/run/systemd/resolve`` and the target of an ``/etc/resolv.conf`` symlink
  into ``/run``).
* **The daemon user's home is hidden** (an empty tmpfs over ``$HOME``): it holds ssh keys,
  cloud and API credentials, shell history.  What an agent needs from it (``~/.claude``,
  ``~/.gitconfig``) comes back explicitly through ``ro_mounts``.  ``$XDG_RUNTIME_DIR`` is
  hidden too when it lives outside ``/run``.
* **The stage's own paths** are at fixed places: the checkout read-write at ``/sloop/work``
  (a path with no ``.git`` component, so no parent repository is discovered), a private
  ``HOME`` at ``/sloop/home``, the worker socket at ``/sloop/worker.sock``, the prompt
  read-only at ``/sloop/prompt.md``, the worker token read-only at ``/sloop/token``,
  and the main repository's ``.git/objects`` read-only at its host path so the
  checkout's ``objects/info/alternates`` resolves.  ``hide`` masks host
  paths (the main repository, the state and socket directories, other checkouts) with empty
  tmpfs; it is applied after the system binds and before ``objects`` and the explicit binds,
  so the objects inside a hidden repository are exposed again and nothing else of it is.
* **Namespaces**: pid, ipc, uts, cgroup (when available) and, with ``network=False``, net
  (loopback only).  Without root, a user namespace makes the rest possible.  All
  capabilities are dropped and ``--new-session`` puts the command in its own session, so it
  cannot push keystrokes into the daemon's terminal (TIOCSTI).  The environment is exactly
  ``spec.env`` plus ``PWD``, which bwrap always sets to the working directory.

**Process lifetime.**  With ``--unshare-pid`` bwrap forks a small init that is pid 1 of the
new namespace and runs the command as its child.  When the command exits, the init reports
its status to bwrap, which exits with it at once; the init itself keeps reaping orphans, but
``--die-with-parent`` gave it (and bwrap) PR_SET_PDEATHSIG=SIGKILL, so bwrap's exit kills
it, and when a namespace's pid 1 dies the kernel SIGKILLs every process left in it: a
daemonised, ``setsid``-ed, SIGTERM-ignoring grandchild dies a moment after bwrap returns
(under a millisecond here; a caller that must know the namespace is empty holds a pidfd on
``init_pid``).  Without ``--die-with-parent`` such a grandchild would outlive bwrap.  The
same signal fires if the daemon dies, even by SIGKILL; it is tied to the *thread* that
spawned bwrap, so spawn from a thread that lives as long as the daemon (the event loop's,
or the one ``sloopd.util.subproc`` starts its tools from).  Signalling bwrap (any signal) kills
the namespace the same way: bwrap 0.8 forwards no signal, so the command never sees a
SIGTERM sent to bwrap.  For a graceful stop, signal the command itself (``command_pid``),
then kill bwrap after the grace period.  These claims are tested.

**Caveats.**  Running the daemon as root, bwrap uses no user namespace: the command runs as
uid 0 without capabilities.  It cannot write the read-only binds or remount anything, and
``/proc/sys`` is bound read-only because bwrap alone leaves it writable for uid 0 (it would
allow e.g. ``kernel.core_pattern``), but it *can read* root-only files of the bound system
(``/etc/shadow``, host ssh keys), shares root's kernel keyring, and owns what it writes.
Run sloopd as a dedicated unprivileged user.  What ``SYSTEM_DIRS`` shows is readable as its
permissions allow (``/etc``, ``/opt``): put secrets the daemon keeps there in ``hide``.
With ``network=True`` the host's network namespace is shared, including abstract Unix
sockets and services on localhost.  The worker socket is bound by inode: it must exist
before the stage starts and not be re-created during it.  No resource limits (memory,
pids, CPU) are set here: that is a cgroup's job.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sloopd.proc import overlay as layers
from sloopd.util import subproc

CHECKOUT_PATH = "/sloop/work"
HOME_PATH = "/sloop/home"
WORKER_SOCKET_PATH = "/sloop/worker.sock"
PROMPT_PATH = "/sloop/prompt.md"
TOKEN_PATH = "/sloop/token"

# The top-level host entries a stage sees, read-only: programs, libraries, configuration.
# An allowlist, not a denylist: a directory an image or an operator adds at the top
# (``/srv`` with other instances' state, ``/data``, ``/work``) stays hidden unless named.
SYSTEM_DIRS = ("bin", "etc", "lib", "lib32", "lib64", "libx32", "opt", "sbin", "usr")
_SYSTEM = frozenset(SYSTEM_DIRS)
# Fresh or empty in every sandbox: nothing of the host's is there to mask.
_SCRATCH = frozenset({"proc", "dev", "sys", "tmp", "run"})
_PROBE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Mount:
    """An operator-configured bind: host ``source`` at ``target`` inside the sandbox."""

    source: Path
    target: str
    writable: bool = False


@dataclass(frozen=True)
class SandboxSpec:
    """Everything one sandboxed command may see; the rest of the host is hidden or read-only.

    ``checkout`` and ``home`` are host directories (read-write at ``/sloop/work`` and
    ``/sloop/home``); ``checkout_writable=False`` is for daemon-side readers of a checkout
    (``git upload-pack``), which must not change what they read.  ``objects`` is the main
    repository's objects directory, read-only at its own path.  ``hide`` should name the
    main repository (its working tree too: untracked files such as ``.env`` would otherwise
    be readable), the state and socket directories and other checkouts.  ``visible_paths``
    are bound read-only at their own paths (``-try``: a missing one stays missing).
    ``env`` is the complete environment.
    """

    checkout: Path
    home: Path
    worker_socket: Path | None = None
    prompt_file: Path | None = None
    token_file: Path | None = None
    objects: Path | None = None
    hide: tuple[Path, ...] = ()
    ro_mounts: tuple[Mount, ...] = ()
    rw_mounts: tuple[Mount, ...] = ()
    visible_paths: tuple[Path, ...] = ()
    network: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    checkout_writable: bool = True
    # A copy-on-write checkout (``sloopd.proc.overlay``): mounted at ``checkout`` in the
    # command's own mount namespace; ``checkout_writable=False`` sees it read-only.
    overlay: layers.Overlay | None = None


def _is_root() -> bool:
    """Whether bwrap runs privileged here (tests patch this to try the user-namespace path)."""
    return os.geteuid() == 0


def _absolute(path: Path | str) -> str:
    """An absolute, normalised path without resolving symlinks (bwrap resolves those)."""
    return os.path.abspath(os.fspath(path))


def _namespace_flags(network: bool, overlaid: bool = False) -> list[str]:
    """The namespaces of every sandbox; the probe uses exactly these."""
    flags = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        flags.append("--unshare-net")
    if overlaid:
        # Inside the overlay's namespace: the child is the daemon's uid again.
        flags += layers.bwrap_user()
    elif not _is_root():
        # Unprivileged bwrap needs a user namespace for the others; "-try" also lets a
        # setuid bwrap work where user namespaces are disabled.
        flags.append("--unshare-user-try")
    flags += ["--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    return flags


def _system_binds() -> list[str]:
    """Each allowlisted top-level entry of the host ``/`` that exists, read-only."""
    args: list[str] = []
    for name in SYSTEM_DIRS:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _fresh_mounts() -> list[str]:
    """New proc/dev, empty writable tmpfs for scratch space, and what DNS needs from /run."""
    args = ["--proc", "/proc"]
    if _is_root():
        # bwrap covers /proc/sysrq-trigger, irq and bus but not sys, whose files are
        # writable by uid 0 even without capabilities.
        args += ["--ro-bind", "/proc/sys", "/proc/sys"]
    args += ["--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp", "--tmpfs", "/run"]
    if os.path.isdir("/var/tmp") and not os.path.islink("/var/tmp"):
        args += ["--tmpfs", "/var/tmp"]
    if os.path.isdir("/run/systemd/resolve"):
        args += ["--ro-bind", "/run/systemd/resolve", "/run/systemd/resolve"]
    resolv = os.path.realpath("/etc/resolv.conf")
    if resolv.startswith("/run/") and not resolv.startswith("/run/systemd/resolve/"):
        args += ["--ro-bind-try", resolv, resolv]
    return args


def _homes() -> list[Path]:
    """The daemon user's home, as its environment and its passwd entry name it."""
    found = [Path(home) for home in (os.environ.get("HOME"),) if home]
    with contextlib.suppress(KeyError):  # a uid with no passwd entry (some containers)
        found.append(Path(pwd.getpwuid(os.getuid()).pw_dir))
    return found


def _default_hidden() -> list[Path]:
    """The daemon user's home and runtime directory: credentials and live sockets."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return [*_homes(), *([Path(runtime)] if runtime else [])]


def hidden_by_default(path: Path | str) -> bool:
    """Whether a host path is invisible in every sandbox unless bound explicitly.

    Paths the system binds already show need no bind of their own (bwrap cannot
    create a mount point inside a read-only bind anyway).
    """
    # Where the entry itself lives (a symlink's location, not its target's).
    absolute = os.path.abspath(path)
    real = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
    parts = real.split("/")
    if len(parts) < 2 or parts[1] not in _SYSTEM:
        return True
    return _under(real, [os.path.realpath(p) for p in _default_hidden()])


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _home_args() -> list[str]:
    """An empty folder where the daemon user's home is, wherever it lives.

    Outside ``SYSTEM_DIRS`` the home would simply be absent; a program that looks for
    it (a CLI resolving ``~`` through ``getpwuid``) finds it empty instead, as it has
    since 0.5.0.  Under a system dir it is masked like any hidden path.
    """
    args: list[str] = []
    for home in dict.fromkeys(os.path.realpath(h) for h in _homes()):
        top = home.split("/")[1] if home != "/" else ""
        if top and top not in _SYSTEM and top not in _SCRATCH and os.path.isdir(home):
            args += ["--tmpfs", home]
    return args


def _hide_args(paths: Iterable[Path]) -> list[str]:
    """Mask each existing, visible host path: a directory with a tmpfs, a file with null.

    ``/dev/null`` needs ``--dev-bind``: a plain bind is ``nodev`` and could not be opened.

    Paths are resolved, because the system is bound at its real paths.  A path the sandbox
    could not see anyway (outside ``SYSTEM_DIRS``, an already hidden one) is skipped, so no
    empty mount points appear there.
    """
    args: list[str] = []
    hidden: list[str] = []
    for raw in paths:
        path = os.path.realpath(raw)
        parts = path.split("/")
        if path == "/" or len(parts) < 2 or parts[1] not in _SYSTEM or _under(path, hidden):
            continue
        if os.path.isdir(path):
            args += ["--tmpfs", path]
        elif os.path.lexists(path):
            args += ["--dev-bind", "/dev/null", path]
        else:
            continue
        hidden.append(path)
    return args


def _env_args(env: Mapping[str, str]) -> list[str]:
    args = ["--clearenv"]
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ValueError(f"invalid environment variable name or value: {key!r}")
        args += ["--setenv", key, value]
    return args


def _explicit_binds(spec: SandboxSpec) -> list[str]:
    """The stage's own paths, then operator mounts, then the paths its command line names."""
    checkout_bind = "--bind" if spec.checkout_writable else "--ro-bind"
    args = [checkout_bind, _absolute(spec.checkout), CHECKOUT_PATH]
    args += ["--bind", _absolute(spec.home), HOME_PATH]
    if spec.worker_socket is not None:
        # Connecting needs no write access to the mount; read-only stops chmod and friends.
        args += ["--ro-bind", _absolute(spec.worker_socket), WORKER_SOCKET_PATH]
    if spec.prompt_file is not None:
        args += ["--ro-bind", _absolute(spec.prompt_file), PROMPT_PATH]
    if spec.token_file is not None:
        args += ["--ro-bind", _absolute(spec.token_file), TOKEN_PATH]
    for mount in (*spec.ro_mounts, *spec.rw_mounts):
        if not mount.target.startswith("/"):
            raise ValueError(f"mount target must be absolute: {mount.target!r}")
        bind = "--bind" if mount.writable else "--ro-bind"
        args += [bind, _absolute(mount.source), _absolute(mount.target)]
    for path in spec.visible_paths:
        # "-try": a path the command names but that does not exist stays absent.
        args += ["--ro-bind-try", _absolute(path), _absolute(path)]
    return args


def command(spec: SandboxSpec, argv: Sequence[str], bwrap: str = "bwrap") -> list[str]:
    """The full bwrap argv that runs ``argv`` in the sandbox ``spec`` describes.

    Order matters to bwrap (each option is a mount applied in turn): the system, fresh
    mounts, ``hide``, the objects directory, the stage's paths, operator mounts, named
    paths; then the root tmpfs is made read-only.
    """
    if not argv:
        raise ValueError("cannot sandbox an empty command")
    overlaid = spec.overlay is not None
    args = [bwrap, *_namespace_flags(spec.network, overlaid), *_system_binds(), *_fresh_mounts()]
    args += _home_args() + _hide_args([*_default_hidden(), *spec.hide])
    if spec.objects is not None:
        objects = os.path.realpath(spec.objects)
        args += ["--ro-bind", objects, objects]
    args += _explicit_binds(spec)
    args += ["--remount-ro", "/"]
    args += _env_args({**spec.env, "PWD": CHECKOUT_PATH})
    args += ["--chdir", CHECKOUT_PATH, "--", *argv]
    if spec.overlay is not None:
        mount = layers.prefix(spec.overlay, Path(spec.checkout), writable=spec.checkout_writable)
        return [*mount, *args]
    return args


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def init_pid(bwrap_pid: int) -> int | None:
    """The host pid of a running bwrap's namespace init (its pid 1), None once it is gone."""
    children = _children(bwrap_pid)
    return children[0] if children else None


def command_pid(bwrap_pid: int) -> int | None:
    """The host pid of the command a running bwrap started, None once it is gone.

    The init's oldest child is the command (orphans reparented to the init come after it).
    The command leads its own session and process group (``--new-session``), so
    ``os.killpg`` on this pid reaches its group too.
    """
    init = init_pid(bwrap_pid)
    commands = _children(init) if init is not None else []
    return commands[0] if commands else None


def _advice(error: str) -> str:
    """One sentence for an operator: what refused the sandbox and what to change."""
    lowered = error.lower()
    if "proc" in lowered and "mount" in lowered:
        return (
            f"bubblewrap cannot mount a fresh /proc here ({error}); in a container, start it "
            "with --security-opt unmask=/proc/* (Podman), or with --security-opt "
            "seccomp=unconfined --security-opt systempaths=unconfined, plus --security-opt "
            "apparmor=unconfined on AppArmor hosts (Docker), so that bubblewrap can mount "
            "a fresh /proc (docs/deploy.md)."
        )
    namespace_words = ("namespace", "uid map", "operation not permitted", "permission denied")
    if any(word in lowered for word in namespace_words):
        if _is_root():
            return (
                f"bubblewrap cannot create namespaces although sloopd runs as root ({error}); "
                "in a container, start it with --cap-add SYS_ADMIN and a seccomp profile "
                "that allows unshare/clone (--security-opt seccomp=unconfined), or run "
                "sloopd as an unprivileged user with user namespaces enabled."
            )
        return (
            f"bubblewrap cannot create an unprivileged user namespace ({error}); enable them "
            "with sysctl kernel.unprivileged_userns_clone=1 and a non-zero "
            "user.max_user_namespaces (on Ubuntu also kernel."
            "apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap), and "
            "in a container use a seccomp profile that allows them "
            "(--security-opt seccomp=unconfined)."
        )
    return f"bubblewrap failed to start a test sandbox: {error}."


def probe(bwrap: str = "bwrap") -> str | None:
    """None when a sandbox can start here, else one sentence on what is missing and the fix.

    It really runs ``true`` through ``command`` (same namespaces and mounts as a stage, with
    the network off, the stricter case), because only the kernel knows whether user
    namespaces, a new /proc or a net namespace are allowed.  No caching: the caller decides.
    """
    exe = shutil.which(bwrap)
    if exe is None:
        return (
            f"bubblewrap ({bwrap}) is not installed; install the bubblewrap package "
            "(apt-get install bubblewrap) so agent stages can run in a sandbox."
        )
    with tempfile.TemporaryDirectory(prefix="sloop-probe-") as tmp:
        work, home = Path(tmp, "work"), Path(tmp, "home")
        work.mkdir()
        home.mkdir()
        # Modes set, not left to the umask: the probe runs in a thread, and before
        # 0.9.0 the loop narrowed the process umask to 0177 while it bound a worker
        # socket; folders made then had no x bit, and the sandbox (its capabilities
        # dropped) could not enter them ("Can't chdir to /sloop/work").
        for folder in (Path(tmp), work, home):
            os.chmod(folder, 0o700)
        spec = SandboxSpec(checkout=work, home=home, network=False, env={"PATH": "/usr/bin:/bin"})
        try:
            # Bounded like every tool's output (sloopd.util.subproc).
            done = subproc.run_blocking(command(spec, ["true"], bwrap=exe), timeout=_PROBE_TIMEOUT)
        except subproc.TimedOut:
            return f"bubblewrap did not start a test sandbox within {_PROBE_TIMEOUT:.0f} s."
        except OSError as exc:
            return f"bubblewrap ({exe}) cannot be executed: {exc}."
    if done.returncode == 0:
        return None
    lines = [ln.strip() for ln in done.stderr.splitlines()]
    error = next((ln for ln in reversed(lines) if ln), f"exit status {done.returncode}")
    return _advice(error.rstrip("."))
