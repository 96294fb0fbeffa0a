"""How large a ticket may be, and what of it the replies carry (issue 23, items 2 and 3).

* A flow with ``{prompt}`` in a command puts the prompt in one argument, which Linux
  caps at 128 KiB (``MAX_ARG_STRLEN``): a ticket that would not fit is refused at
  ``post`` naming ``{prompt_file}`` and standard input, and a prompt that grew past it
  after the post (the flow changed) fails its stage before any child starts, with the
  same advice: never the kernel's bare "Argument list too long".  ``{prompt_file}``
  hands any ticket over by path.
* A ticket file over ``repo.max_ticket_bytes`` (1 MiB by default) is refused before
  it is read, naming the limit; ``show <ticket>`` and ``brief`` carry at most 64 KiB
  of a body, clipped with a marker, with the full size beside it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sloopd.wire.api import MAX_SHOWN_BODY_BYTES
from tests.support.agents import (
    Bench,
    install_probe,
    probe_argv,
    read_json,
    sloop_toml,
    ticket_text,
)
from tests.support.daemon import make_repo, wait_until
from tests.support.tickets import SLOOP_TOML, Operator

MAX_ARG_STRLEN = 131072
DEFAULT_LIMIT = 1 << 20
ADVICE = ("{prompt_file}", "standard input")
BIG_BODY = "x" * (200 * 1024)  # the 200 KB ticket


def body_of(size: int) -> str:
    """A body of ``size`` bytes in lines, as a person writes one (never one long line)."""
    line = "All work and no play makes a dull ticket.\n"
    text = line * (size // len(line) + 1)
    return text[:size]


def ticket_file(size: int, title: str = "Sized") -> str:
    """A ticket file of exactly ``size`` bytes."""
    head = f"# {title}\n\n"
    return head + body_of(size - len(head))


# --- a prompt in argv (item 2) --------------------------------------------------------


def test_a_ticket_too_big_for_one_argument_is_refused_at_post(bench: Bench) -> None:
    agent = bench.argv("--write", "{ticket}.txt=done", "{prompt}")
    bench.setup(
        sloop_toml(agent),
        {"big": ticket_text("Big", BIG_BODY), "fits": ticket_text("Fits", "x" * 100_000)},
    )
    bench.start()

    err = bench.client.error("post", {"path": "tickets/big.md"})
    assert err["code"] == "invalid_arguments", err
    for advice in ADVICE:
        assert advice in err["message"], err
    assert "MAX_ARG_STRLEN" in err["message"], err
    details = err["details"]
    assert details["path"] == "tickets/big.md"
    assert details["stage"] == "implement"
    assert details["key"] == "agent.command"
    assert details["limit_bytes"] == MAX_ARG_STRLEN
    assert details["size_bytes"] > MAX_ARG_STRLEN
    assert bench.dashboard()["tickets"] == []  # nothing registered

    # Below the limit {prompt} still works: the child gets the prompt as one argument.
    bench.post("fits")
    assert bench.wait_run("fits#1")["state"] == "merged"


def test_prompt_file_hands_a_big_ticket_over_by_path(bench: Bench) -> None:
    agent = bench.argv(
        "--env-dump", bench.flag("env-{run}.json"), "--write", "big.txt=done", "{prompt_file}"
    )
    bench.setup(sloop_toml(agent), {"big": ticket_text("Big", BIG_BODY)})
    bench.start()
    bench.post("big")
    run = bench.wait_run("big#1")
    assert run["state"] == "merged", run
    env = read_json(bench.path("env-R1.json"))
    assert env["argv_rest"] == ["/sloop/prompt.md"]  # the path as the sandbox shows it
    assert env["argv_rest"] == [env["SLOOP_PROMPT_FILE"]]


def test_a_prompt_past_one_argument_fails_its_stage_before_it_starts(bench: Bench) -> None:
    """Posted while its flow read the prompt from a file, run after the flow put it in
    argv: the stage fails naming the fix, and no child was started."""
    by_file = bench.argv("--write", "big.txt=done", "--pidfile", bench.flag("pid"), "{prompt_file}")
    bench.setup(sloop_toml(by_file), {"big": ticket_text("Big", BIG_BODY)}, commit_config=False)
    bench.start()
    assert bench.daemon is not None
    bench.post("big", hold=True)

    in_argv = bench.argv("--write", "big.txt=done", "--pidfile", bench.flag("pid"), "{prompt}")
    bench.write_config(sloop_toml(in_argv))
    bench.daemon.signal(signal.SIGHUP)
    wait_until(lambda: "configuration reloaded" in bench.log())
    bench.ok("ready", {"ref": "big"})

    run = bench.wait_run("big#1")
    assert run["state"] == "failed", run
    reason = run["reason"] or ""
    for advice in (*ADVICE, "MAX_ARG_STRLEN", "was not started"):
        assert advice in reason, reason
    assert "Argument list too long" not in reason, reason
    assert not bench.path("pid").exists()  # the agent never ran


# --- the size of a ticket file (item 3) -----------------------------------------------


@pytest.fixture
def op(sandbox: Path) -> Iterator[Operator]:
    operator = Operator(sandbox, make_repo(sandbox, {"sloop.toml": SLOOP_TOML}))
    try:
        yield operator
    finally:
        operator.stop()


def assert_too_large(err: dict[str, Any], path: str, size: int, limit: int) -> None:
    assert err["code"] == "invalid_arguments", err
    assert err["details"] == {"path": path, "size_bytes": size, "limit_bytes": limit}, err
    assert "repo.max_ticket_bytes" in err["message"], err
    assert f"{limit} bytes" in err["message"], err


def test_a_ticket_past_the_default_limit_is_refused_before_it_is_read(op: Operator) -> None:
    huge = op.repo / "tickets" / "huge.md"
    huge.parent.mkdir()
    with open(huge, "wb") as out:  # the 64 MiB ticket, as a sparse file
        out.write(b"# Huge\n\n")
        out.truncate(64 << 20)
    err = op.error("post", {"path": "tickets/huge.md"})
    assert_too_large(err, "tickets/huge.md", 64 << 20, DEFAULT_LIMIT)
    assert "1.0 MiB" in err["message"], err
    assert op.dashboard()["tickets"] == []

    # At the limit exactly, a ticket is taken.
    op.write("tickets/full.md", ticket_file(DEFAULT_LIMIT))
    assert os.path.getsize(op.repo / "tickets" / "full.md") == DEFAULT_LIMIT
    assert op.post("tickets/full.md", manual=True)["created"] is True


def test_the_operator_sets_the_limit(sandbox: Path) -> None:
    config = SLOOP_TOML + '\n[repo]\nmax_ticket_bytes = "4KiB"\n'
    op = Operator(sandbox, make_repo(sandbox, {"sloop.toml": config}))
    try:
        op.write("tickets/fits.md", ticket_file(4096))
        assert op.post("tickets/fits.md", manual=True)["created"] is True
        op.write("tickets/over.md", ticket_file(4097))
        assert_too_large(
            op.error("post", {"path": "tickets/over.md"}), "tickets/over.md", 4097, 4096
        )
        # A registered ticket that grew past the limit keeps its last good content.
        op.write("tickets/fits.md", ticket_file(5000, title="Grown"))
        assert_too_large(
            op.error("post", {"path": "tickets/fits.md"}), "tickets/fits.md", 5000, 4096
        )
        assert op.detail("fits")["title"] == "Sized"
    finally:
        op.stop()


def test_a_bad_limit_is_refused_at_start_naming_the_key(sandbox: Path) -> None:
    from tests.support.daemon import new_daemon

    repo = make_repo(sandbox, {"sloop.toml": SLOOP_TOML + '\n[repo]\nmax_ticket_bytes = "1GiB"\n'})
    code, stdout, log = new_daemon(sandbox, repo).run_to_exit()
    assert code != 0
    assert stdout == ""
    assert "repo.max_ticket_bytes" in log, log


def test_title_and_project_stay_one_line_of_a_row(op: Operator) -> None:
    op.write("tickets/long-title.md", ticket_text("T" * 501, "Body."))
    err = op.error("post", {"path": "tickets/long-title.md"})
    assert err["code"] == "invalid_arguments"
    assert "title" in err["message"], err
    assert "500" in err["message"], err
    op.write("tickets/long-project.md", f'+++\nproject = "{"p" * 201}"\n+++\n# T\n')
    err = op.error("post", {"path": "tickets/long-project.md"})
    assert err["details"] == {"path": "tickets/long-project.md", "line": 2}, err
    assert "200" in err["message"], err
    assert op.dashboard()["tickets"] == []


# --- what show and brief carry (item 3) -----------------------------------------------


def test_show_carries_a_bounded_body_and_its_full_size(op: Operator) -> None:
    op.write("tickets/full.md", ticket_file(DEFAULT_LIMIT))
    op.post("tickets/full.md", manual=True)
    full = (op.repo / "tickets" / "full.md").read_text().removeprefix("# Sized\n\n")
    value = op.detail("full")
    assert value["body_bytes"] == len(full.encode())
    assert value["body_clipped"] is True
    shown, _, marker = value["body"].rpartition("\n\n[sloopd: ")
    assert len(shown.encode()) <= MAX_SHOWN_BODY_BYTES
    assert full.startswith(shown)
    assert str(value["body_bytes"]) in marker, marker
    assert "tickets/full.md" in marker, marker
    # The whole reply stays near the bound, whatever the ticket holds.
    raw = op.client.call("show", {"ref": "full"})
    assert raw["ok"] is True
    assert len(str(raw)) < MAX_SHOWN_BODY_BYTES + 8192

    op.write("tickets/small.md", ticket_text("Small", "A short body."))
    op.post("tickets/small.md", manual=True)
    small = op.detail("small")
    assert (small["body"], small["body_bytes"], small["body_clipped"]) == (
        "A short body.",
        len(b"A short body."),
        False,
    )


def test_brief_carries_a_bounded_body_and_points_at_the_prompt_file(bench: Bench) -> None:
    install_probe(bench)
    out = bench.flag("brief.json")
    probe = probe_argv(bench, out, [{"do": "req", "key": "brief", "verb": "brief"}])
    bench.setup(sloop_toml(probe), {"big": ticket_text("Big", body_of(300 * 1024))})
    bench.start()
    bench.post("big")
    bench.wait_run("big#1")
    answer = read_json(Path(out))["brief"]
    assert answer["ok"] is True, answer
    ticket = answer["data"]["ticket"]
    assert ticket["body_bytes"] == 300 * 1024
    assert ticket["body_clipped"] is True
    shown, _, marker = ticket["body"].rpartition("\n\n[sloopd: ")
    assert len(shown.encode()) <= MAX_SHOWN_BODY_BYTES
    assert body_of(300 * 1024).startswith(shown)
    assert "SLOOP_PROMPT_FILE" in marker, marker
