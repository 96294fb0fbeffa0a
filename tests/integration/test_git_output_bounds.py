"""What a daemon git prints is bounded, whatever an agent's repository makes it print.

The implement agent commits one file, then appends some 25,000 lines (about 96 MiB)
naming folders that cannot be normalised to its checkout's
``objects/info/alternates`` and exits 0 (issue 34, item 1).  Every git that reads
that object store then prints one ``error: unable to normalize alternate object
path`` per line: the bring-back's sandboxed listing, ``upload-pack`` and
``pack-objects``.  On 0.8.0 the daemon kept all of it (its peak RSS grew from 41 MiB
to 431 MiB) and the listing wrote the same flood to a file in the state directory.

Here the daemon's peak resident size (``VmHWM``) may grow by far less than the flood,
the run still merges (the flood is an error message, not a failure), and no file
the daemon writes in its state directory grows with the flood.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.support.agents import Bench, sloop_toml, ticket_text

# 25,000 lines of ~3.9 KiB: 93 MiB, one error line each for every git that reads them.
FLOOD_LINES = 25_000
FLOOD_AGENT = r"""
import os, subprocess, sys

ID = ["-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]
with open("work.txt", "w") as f:
    f.write("the agent's work\n")
subprocess.run(["git", *ID, "add", "work.txt"], check=True)
subprocess.run(["git", *ID, "commit", "-q", "-m", "work"], check=True)
git_dir = subprocess.run(
    ["git", "rev-parse", "--git-dir"], capture_output=True, text=True, check=True
).stdout.strip()
with open(os.path.join(git_dir, "objects", "info", "alternates"), "a") as f:
    for n in range(int(sys.argv[1])):
        f.write(f"/missing-{n:06d}/" + "d" * 3900 + "/../../../../../../../../..\n")
"""
FLOW = (
    "[[flows.default.stages]]\nname = 'implement'\naction = 'agent'\n\n"
    "[[flows.default.stages]]\nname = 'sync'\naction = 'sync'\n\n"
    "[[flows.default.stages]]\nname = 'merge'\naction = 'ff_only'\n"
)
MiB = 1024 * 1024
# The flood is ~93 MiB per git that prints it (five or more of them at a bring-back);
# what the daemon may add to its peak for it is a small part of one.
PEAK_GROWTH_LIMIT = 100 * MiB
# No file the daemon writes in its state directory holds more than this of it.
STATE_FILE_LIMIT = 4 * MiB


def peak_rss(pid: int) -> int:
    """A process's peak resident set size (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def daemon_files(state: Path) -> Iterator[tuple[int, str]]:
    """(size, path) of the files the daemon writes in its state directory: not the
    agent's checkout (its alternates file is the agent's doing, wherever it is moved
    to be deleted) nor the store."""
    for folder, dirs, files in os.walk(state):
        # A checkout, in its place or set aside in trash/ to be deleted: the agent's.
        dirs[:] = [d for d in dirs if d != ".git" and Path(folder, d) != state / "checkouts"]
        for name in files:
            path = Path(folder) / name
            with contextlib.suppress(OSError):
                if not path.is_symlink() and not name.startswith("store.sqlite3"):
                    yield path.stat().st_size, str(path.relative_to(state))


class LargestFile(threading.Thread):
    """The largest daemon file seen in the state directory while the run goes on
    (a merged run's folders are set aside and deleted as it settles)."""

    def __init__(self, state: Path) -> None:
        super().__init__(daemon=True)
        self.state = state
        self.largest: tuple[int, str] = (0, "")
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            self.largest = max([self.largest, *daemon_files(self.state)])


def test_an_alternates_flood_neither_swells_the_daemon_nor_fills_its_state(bench: Bench) -> None:
    script = bench.root / "agents" / "flood.py"
    script.write_text(FLOOD_AGENT, encoding="utf-8")
    agent = [*bench.argv(), str(FLOOD_LINES)]
    agent[1] = str(script)
    bench.setup(sloop_toml(agent, extra=FLOW), {"flood": ticket_text("Flood")})
    bench.start()
    assert bench.daemon is not None
    assert bench.daemon.proc is not None
    pid = bench.daemon.proc.pid
    bench.dashboard()
    before = peak_rss(pid)

    watch = LargestFile(bench.state_dir)
    watch.start()
    bench.post("flood")
    try:
        run = bench.wait_run("flood#1", timeout=240)
    finally:
        watch.done.set()
        watch.join()

    after = peak_rss(pid)
    print(f"daemon VmHWM: {before / MiB:.1f} MiB before, {after / MiB:.1f} MiB after")
    assert after - before < PEAK_GROWTH_LIMIT, (before, after)
    assert run["state"] == "merged", run
    assert (bench.repo / "work.txt").read_text() == "the agent's work\n"
    print(f"largest daemon file in the state directory: {watch.largest}")
    assert watch.largest[0] < STATE_FILE_LIMIT, watch.largest
