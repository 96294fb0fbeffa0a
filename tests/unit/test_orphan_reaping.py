"""The subreaper's once-a-second sweep: adopted zombies collected, nobody else's.

The sweep looks at every process on the host only when a child of ours has
exited: on a CI host with thousands of processes a scan each second was tens of
milliseconds of the event loop's time, spent while nothing was to be collected.
Run in a helper process, which becomes the subreaper (the test process must not).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

HELPER = textwrap.dedent(
    """
    import os, time
    from sloopd.proc import peers
    from sloopd.util import procfs

    assert peers.become_subreaper()
    scans = []
    every_pid = procfs.pids

    def counted(*args, **kwargs):
        scans.append(1)
        return every_pid(*args, **kwargs)

    procfs.pids = counted

    def sweep(label):
        print(label, peers.reap_adopted_orphans(set), len(scans), flush=True)

    def exited(pid):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if found is not None:
                return
            time.sleep(0.01)
        raise SystemExit(f"{pid} never exited")

    sweep("no-child")
    go_read, go_write = os.pipe()
    pid_read, pid_write = os.pipe()
    middle = os.fork()
    if middle == 0:
        orphan = os.fork()
        if orphan == 0:
            os.setpgid(0, 0)  # a run child's descendant: its own group, as they are
            os.read(go_read, 1)
            os._exit(0)
        os.write(pid_write, str(orphan).encode())
        os._exit(0)
    orphan = int(os.read(pid_read, 32))
    os.waitpid(middle, 0)  # the middle child's own waiter collects it
    sweep("adopted-alive")
    os.write(go_write, b"x")
    exited(orphan)
    sweep("adopted-exited")
    sweep("after")
    # One of our own tools (our process group), exited: seen, never taken from its waiter.
    tool = os.fork()
    if tool == 0:
        os._exit(7)
    exited(tool)
    sweep("own-tool-exited")
    _, status = os.waitpid(tool, 0)
    print("tool-status", os.waitstatus_to_exitcode(status), flush=True)
    """
)


def test_the_sweep_scans_only_after_a_child_exited_and_takes_only_adopted_zombies() -> None:
    done = subprocess.run(
        [sys.executable, "-c", HELPER], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    # (reaped, scans so far): no scan while no child of ours is a zombie.
    assert lines["no-child"] == "0 0"
    assert lines["adopted-alive"] == "0 0"
    # The adopted orphan exited: one scan, and it is collected.
    assert lines["adopted-exited"] == "1 1"
    assert lines["after"] == "0 1"
    # Our own tool's zombie makes the sweep look, but is left to its waiter.
    assert lines["own-tool-exited"] == "0 2"
    assert lines["tool-status"] == "7"
