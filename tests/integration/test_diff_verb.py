"""The ``diff`` verb (0.7.0): a run's branch against its base, bounded, read-only.

Against a real daemon on real runs: what a merge gave main, what a failed run
left on its branch, a binary file, a cut at ``max_bytes``, the errors; and
``sloopctl diff`` printing it. The bounded git call itself is tested on ``yes``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from sloopd.util import subproc
from sloopd.views.diff import parse_numstat
from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import git, sloopctl_argv, sloopctl_env

BINARY_STAGE = (
    "import subprocess\n"
    "open('blob.bin', 'wb').write(bytes(range(256)) * 4)\n"
    "subprocess.run(['git', 'add', '-A'], check=True)\n"
    "subprocess.run(['git', '-c', 'user.name=a', '-c', 'user.email=a@example.invalid',"
    " 'commit', '-qm', 'a binary file'], check=True)\n"
)


def test_a_merged_run_diffs_what_main_received(bench: Bench) -> None:
    agent = bench.argv("--write", "notes/hello.txt=hello from {run}")
    bench.setup(sloop_toml(agent), {"hello": ticket_text("Say hello")})
    before = bench.rev("main")
    bench.start()
    bench.post("hello")
    run = bench.wait_run("hello#1")
    assert run["state"] == "merged"
    data = bench.ok("diff", {"run": "hello#1"})
    assert data["run"] == run["id"]
    assert data["alias"] == "hello#1"
    assert data["branch"] == run["branch"]
    assert data["base_source"] == "main_before_merge"
    assert (data["base"], data["head"]) == (before, bench.rev("main"))
    assert data["files"] == [
        {"path": "notes/hello.txt", "old_path": None, "added": 1, "deleted": 0, "binary": False}
    ]
    assert f"+hello from {run['id']}\n" in data["text"]
    assert data["text"].startswith("diff --git a/notes/hello.txt b/notes/hello.txt\n")
    assert data["bytes"] == len(data["text"].encode())
    assert (data["truncated"], data["files_truncated"], data["problem"]) == (False, False, None)
    # The same text git gives for those two commits.
    assert data["text"] == git(bench.repo, "diff", before, data["head"]) + "\n"


def test_a_failed_run_diffs_its_branch_from_its_base_and_a_binary_file_is_counted(
    bench: Bench,
) -> None:
    flows = {
        "broken": [
            {
                "name": "implement",
                "action": "agent",
                "command": [sys.executable, "-c", BINARY_STAGE],
            },
            {"name": "test", "action": "command", "command": bench.argv("--exit", "1")},
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"bin": ticket_text("Bin", flow="broken")})
    base = bench.rev("main")
    bench.start()
    bench.post("bin")
    run = bench.wait_run("bin#1")
    assert run["state"] == "failed"
    data = bench.ok("diff", {"run": run["id"]})
    assert (data["base"], data["base_source"]) == (base, "run_base")
    assert data["head"] == run["stages"][0]["commit"]  # what implement left
    assert data["files"] == [
        {"path": "blob.bin", "old_path": None, "added": None, "deleted": None, "binary": True}
    ]
    assert "Binary files /dev/null and b/blob.bin differ" in data["text"]
    assert bench.rev("main") == base  # a read: nothing moved


def test_max_bytes_cuts_the_text_at_a_line_end_and_says_so(bench: Bench) -> None:
    writes = [f"--write=f{n}.txt={'x' * 60} {n}" for n in range(30)]
    bench.setup(sloop_toml(bench.argv(*writes)), {"many": ticket_text("Many files")})
    bench.start()
    bench.post("many")
    bench.wait_run("many#1")
    whole = bench.ok("diff", {"run": "many#1"})
    assert len(whole["files"]) == 30
    assert not whole["truncated"]
    cut = bench.ok("diff", {"run": "many#1", "max_bytes": 500})
    assert cut["truncated"] is True
    assert cut["max_bytes"] == 500
    assert 0 < cut["bytes"] <= 500
    assert cut["text"].endswith("\n")
    assert whole["text"].startswith(cut["text"])
    assert cut["files"] == whole["files"]  # the summary is not cut with the text


def test_diff_errors_follow_the_protocol(bench: Bench) -> None:
    bench.setup(sloop_toml(bench.argv()), {})
    bench.start()
    client = bench.client
    missing = client.error("diff", {"run": "R99"})
    assert missing["code"] == "not_found"
    assert missing["details"] == {"ref": "R99"}
    for args, field in (
        ({}, "run"),
        ({"run": "R1", "max_bytes": 0}, "max_bytes"),
        ({"run": "R1", "max_bytes": 4 * 1024 * 1024 + 1}, "max_bytes"),
        ({"run": "R1", "max_bytes": "9"}, "max_bytes"),
        ({"run": "R1", "colour": True}, "colour"),
    ):
        error = client.error("diff", args)
        assert error["code"] == "invalid_arguments", (args, error)
        assert error["details"]["field"] == field, (args, error)


def test_sloopctl_diff_prints_the_diff_and_a_summary(bench: Bench) -> None:
    bench.setup(sloop_toml(bench.argv("--write", "a.txt=one")), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    run = bench.wait_run("one#1")
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    done = subprocess.run(
        sloopctl_argv(bench.daemon.socket, "diff", "one#1"),
        capture_output=True,
        text=True,
        env=sloopctl_env(),
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == bench.ok("diff", {"run": run["id"]})["text"]
    assert "+one" in done.stdout
    assert f"{run['id']} {run['branch']}:" in done.stderr
    assert "+1 -0  a.txt" in done.stderr
    missing = subprocess.run(
        sloopctl_argv(bench.daemon.socket, "diff", "R42"),
        capture_output=True,
        text=True,
        env=sloopctl_env(),
        timeout=30,
        check=False,
    )
    assert missing.returncode == 1
    assert "not_found" in missing.stderr


def test_a_bounded_tool_is_killed_at_its_limit() -> None:
    started = time.monotonic()
    done = asyncio.run(subproc.run(["yes"], timeout=600, stdout_limit=10_000))
    assert done.truncated is True
    assert len(done.stdout) == 10_000
    assert done.stdout.startswith("y\ny\n")
    # Killed at the limit, not at the deadline: a sanity bound ten times short of it.
    assert time.monotonic() - started < 60
    small = asyncio.run(subproc.run(["printf", "ok"], timeout=10, stdout_limit=10_000))
    assert (small.returncode, small.stdout, small.truncated) == (0, "ok", False)


def test_numstat_is_read_with_renames_and_binaries() -> None:
    output = "3\t1\tsrc/a.py\0-\t-\tlogo.png\0" + "0\t0\t\0old name.txt\0new name.txt\0"
    assert parse_numstat(output) == [
        {"path": "src/a.py", "old_path": None, "added": 3, "deleted": 1, "binary": False},
        {"path": "logo.png", "old_path": None, "added": None, "deleted": None, "binary": True},
        {
            "path": "new name.txt",
            "old_path": "old name.txt",
            "added": 0,
            "deleted": 0,
            "binary": False,
        },
    ]
    assert parse_numstat("") == []
