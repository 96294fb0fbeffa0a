"""A subscription login reaches the preset's CLI, read-only, and nothing else of HOME does.

An operator who ran ``claude login`` (or Gemini CLI's Google
sign-in) as the daemon's user expects a preset to use that login unattended.
The sandbox hides the daemon user's HOME, so each preset names its login files
and Sloop shows exactly those, read-only, in the run's own HOME when they exist.
The CLIs here are stand-ins on PATH named like the real ones (the real CLIs would
also call the vendor's account endpoints, which no test may reach); what is under
test is what the sandbox shows them.
"""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from tests.support.agents import BENCH_VAR, Bench, ticket_text, toml_value

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

LOGINS = {
    "claude": ".claude/.credentials.json",
    "gemini": ".gemini/oauth_creds.json",
}

# Reports what the run's HOME shows, then does the work as a CLI would.
FAKE_CLI = r"""#!/bin/sh
cat > /dev/null
me=$(basename "$0")
case "$me" in
  claude) login=.claude/.credentials.json; other=.claude/history.jsonl ;;
  gemini) login=.gemini/oauth_creds.json; other=.gemini/history.jsonl ;;
esac
report="$TEST_BENCH_ROOT/flags/seen-$me-$SLOOP_STAGE"
{
  content=$(cat "$HOME/$login" 2>/dev/null || true)
  printf 'content=%s\n' "$content"
  if [ -w "$HOME/$login" ]; then echo writable=yes; else echo writable=no; fi
  if [ -e "$HOME/$other" ]; then echo other=yes; else echo other=no; fi
} > "$report"
printf '%s\n' "$SLOOP_STAGE" >> "hello-$SLOOP_STAGE.txt"
git add "hello-$SLOOP_STAGE.txt"
git -c user.name=a -c user.email=a@x commit -qm "$me in $SLOOP_STAGE"
"""


def seen(bench: Bench, cli: str, stage: str) -> dict[str, str]:
    text = bench.path(f"seen-{cli}-{stage}").read_text()
    return dict(line.split("=", 1) for line in text.splitlines())


def fake_clis(bench: Bench) -> Path:
    folder = bench.root / "bin"
    folder.mkdir()
    for name in LOGINS:
        script = folder / name
        script.write_text(FAKE_CLI)
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    bench.env["PATH"] = f"{folder}:/usr/bin:/bin"
    return folder


def logged_in_home(bench: Bench, clis: list[str]) -> Path:
    home = bench.root / "home"
    for cli in clis:
        login = home / LOGINS[cli]
        login.parent.mkdir(parents=True, exist_ok=True)
        login.write_text(json.dumps({"login": f"{cli}-secret"}))
        login.chmod(0o600)
        (login.parent / "history.jsonl").write_text("what the operator asked yesterday\n")
        (login.parent / "sessions.jsonl").write_text("another session\n")
    home.mkdir(exist_ok=True)
    bench.env["HOME"] = str(home)
    return home


STAGES = """
[[flows.default.stages]]
name = "implement"
action = "agent"

[[flows.default.stages]]
name = "second"
action = "agent"
agent = "gemini"

[[flows.default.stages]]
name = "merge"
action = "ff_only"
"""


def config(bench: Bench, folder: Path, flows: str = STAGES) -> str:
    return (
        "[agent]\n"
        'preset = "claude"\n'
        f"env = {toml_value([BENCH_VAR])}\n"
        f"ro_mounts = {toml_value([str(folder)])}\n"
        f"rw_mounts = {toml_value([str(bench.root / 'flags')])}\n"
        f"{flows}"
    )


def test_each_presets_login_is_shown_read_only_and_nothing_else_of_home(bench: Bench) -> None:
    folder = fake_clis(bench)
    home = logged_in_home(bench, ["claude", "gemini"])
    bench.setup(config(bench, folder), {"hello": ticket_text("Add hello")})
    bench.start()
    bench.post("hello")
    run = bench.wait_run("hello#1")

    assert run["state"] == "merged", run
    # [agent] preset = "claude": the stage that runs it sees Claude's login, read-only.
    implement = seen(bench, "claude", "implement")
    assert implement == {"content": '{"login": "claude-secret"}', "writable": "no", "other": "no"}
    # A stage's own preset (agent = "gemini") brings its login too.
    second = seen(bench, "gemini", "second")
    assert second == {"content": '{"login": "gemini-secret"}', "writable": "no", "other": "no"}
    # The operator's files are untouched by the runs.
    assert json.loads((home / LOGINS["claude"]).read_text()) == {"login": "claude-secret"}


def test_without_a_login_file_the_preset_runs_with_none(bench: Bench) -> None:
    folder = fake_clis(bench)
    logged_in_home(bench, [])
    flows = '\n[[flows.default.stages]]\nname = "implement"\naction = "agent"\n'
    flows += '\n[[flows.default.stages]]\nname = "merge"\naction = "ff_only"\n'
    bench.setup(config(bench, folder, flows), {"hello": ticket_text("Add hello")})
    bench.start()
    bench.post("hello")
    run = bench.wait_run("hello#1")

    assert run["state"] == "merged", run
    assert seen(bench, "claude", "implement") == {"content": "", "writable": "no", "other": "no"}


def test_an_explicit_command_gets_no_login(bench: Bench) -> None:
    folder = fake_clis(bench)
    logged_in_home(bench, ["claude"])
    command = ["sh", "-c", 'exec claude < "$SLOOP_PROMPT_FILE"']
    text = config(bench, folder).replace(
        'preset = "claude"\n', f"command = {toml_value(command)}\n"
    )
    text = text.replace('agent = "gemini"\n', f"command = {toml_value(command)}\n")
    bench.setup(text, {"hello": ticket_text("Add hello")})
    bench.start()
    bench.post("hello")
    run = bench.wait_run("hello#1")

    assert run["state"] == "merged", run
    assert seen(bench, "claude", "implement")["content"] == ""
