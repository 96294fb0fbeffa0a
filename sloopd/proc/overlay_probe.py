"""Whether copy-on-write checkouts work here: the whole chain tried once, as a stage runs it.

Only the kernel knows whether a user namespace may mount an overlay (its version,
``user.max_user_namespaces``, a container's seccomp profile, the file system of the
state directory), so the probe makes a one-file layer in the state directory, mounts
it under a fresh upper layer through ``sloopd.proc.overlay`` and bwrap, writes a file
through it and checks that the write landed in the upper layer only.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from sloopd.proc import overlay, sandbox
from sloopd.util import subproc

_PROBE_TIMEOUT = 10.0


def probe(where: Path) -> str | None:
    """None when a layered checkout works under ``where``, else one sentence saying why not."""
    missing = overlay.missing_tools()
    if missing is not None:
        return missing
    if not overlay.usable_path(where):
        return f"the state directory's path {where} holds a character overlayfs cannot be given"
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".probe-", dir=where) as tmp:
        root = Path(tmp)
        for name in ("l", "up", "w", "m", "h"):
            (root / name).mkdir(mode=0o700)
        (root / "l" / "shared").write_text("shared\n", encoding="utf-8")
        layers = overlay.Overlay(root, ("l",), root / "up", root / "w")
        spec = sandbox.SandboxSpec(
            checkout=root / "m", home=root / "h", network=False,
            env={"PATH": "/usr/bin:/bin"}, overlay=layers,
        )  # fmt: skip
        script = 'test "$(cat shared)" = shared && echo mine > written'
        try:
            done = subproc.run_blocking(
                sandbox.command(spec, ["sh", "-c", script]), timeout=_PROBE_TIMEOUT
            )
        except subproc.TimedOut:
            return f"a layered checkout did not start within {_PROBE_TIMEOUT:.0f} s"
        except OSError as exc:
            return f"a layered checkout could not be started: {exc}"
        if done.returncode != 0:
            lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
            said = lines[-1].rstrip(".") if lines else f"exit status {done.returncode}"
            return f"the kernel refused an overlay mount in a user namespace ({said})"
        if not (root / "up" / "written").is_file() or (root / "l" / "written").exists():
            return "a write through a layered checkout did not land in its own layer"
        shutil.rmtree(root / "w", ignore_errors=True)
    return None
