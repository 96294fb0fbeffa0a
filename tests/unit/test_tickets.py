"""Ticket files without a daemon: ``sloopd.tickets.parse`` and ``sloopd.tickets.read``.

Every refusal is ``invalid_arguments`` whose message starts with the file (and,
where a line is to blame, ``path:LINE:``) and whose details carry ``path`` and
``line``; the integration tests prove the daemon passes them through unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sloopd.queue.tickets import TicketFile, default_project, parse, read
from sloopd.util.names import ticket_name_problem
from sloopd.wire.api import ErrorCode, ProtocolError

FLOWS = {"default"}
TICKETS = "tickets"


def parsed(text: str, path: str = "tickets/fix-login.md", flows: set[str] = FLOWS) -> TicketFile:
    return parse(text, path, TICKETS, flows)


def refusal(
    text: str, path: str = "tickets/fix-login.md", flows: set[str] = FLOWS
) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        parse(text, path, TICKETS, flows)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENTS
    return caught.value


def line_refusal(text: str, line: int, path: str = "tickets/fix-login.md") -> str:
    """The message of a refusal that names ``path:line``, with its details checked."""
    err = refusal(text, path)
    assert err.message.startswith(f"{path}:{line}: "), err.message
    assert err.details == {"path": path, "line": line}
    return err.message


# --- what a ticket file yields --------------------------------------------------------


def test_plain_markdown_takes_every_default() -> None:
    ticket = parsed("# Fix the login form\n\nUsers cannot log in.\nSecond line.\n")
    assert ticket == TicketFile(
        name="fix-login",
        path="tickets/fix-login.md",
        title="Fix the login form",
        body="Users cannot log in.\nSecond line.",
        flow="default",
        project="default",
        priority=0,
    )


def test_front_matter_sets_flow_project_and_priority() -> None:
    text = '+++\nflow = "fast"\nproject = "billing"\npriority = 7\n+++\n# Title\nbody\n'
    ticket = parse(text, "tickets/fix-login.md", TICKETS, {"default", "fast"})
    assert (ticket.flow, ticket.project, ticket.priority) == ("fast", "billing", 7)
    assert (ticket.title, ticket.body) == ("Title", "body")


def test_negative_priority_is_an_integer_like_any_other() -> None:
    assert parsed("+++\npriority = -2\n+++\n# T\n").priority == -2


def test_empty_front_matter_and_empty_file_are_fine() -> None:
    assert parsed("+++\n+++\n# T\n").title == "T"
    empty = parsed("")
    assert (empty.title, empty.body, empty.priority) == ("fix-login", "", 0)


def test_title_falls_back_to_the_name() -> None:
    assert parsed("Just a body, no heading.\n").title == "fix-login"
    assert parsed("Just a body, no heading.\n").body == "Just a body, no heading."
    # "## " is a subheading and "#x" no heading at all; "# " alone has no text.
    assert parsed("## Sub\n#x\n").title == "fix-login"
    assert parsed("# \nbody\n").title == "fix-login"


def test_the_first_level_one_heading_is_the_title_and_the_rest_is_the_body() -> None:
    ticket = parsed("Intro line.\n\n# The title \n\nAfter.\n# Second heading\n")
    assert ticket.title == "The title"
    assert ticket.body == "Intro line.\n\n\nAfter.\n# Second heading"


def test_crlf_files_parse_like_lf_files() -> None:
    text = '+++\r\nproject = "ops"\r\npriority = 2\r\n+++\r\n# Title\r\nbody\r\n'
    ticket = parsed(text)
    assert (ticket.project, ticket.priority, ticket.title, ticket.body) == (
        "ops",
        2,
        "Title",
        "body",
    )


@pytest.mark.parametrize(
    ("path", "folder", "project"),
    [
        ("tickets/x.md", "tickets", "default"),
        ("tickets/billing/x.md", "tickets", "billing"),
        ("tickets/billing/deep/er/x.md", "tickets", "billing"),
        ("x.md", "tickets", "default"),
        ("docs/billing/x.md", "tickets", "default"),
        ("ticketsx/billing/x.md", "tickets", "default"),
        ("work/items/alpha/x.md", "work/items", "alpha"),
        ("work/items/x.md", "work/items", "default"),
        ("work/alpha/x.md", "work/items", "default"),
    ],
)
def test_project_is_the_folder_directly_below_the_tickets_folder(
    path: str, folder: str, project: str
) -> None:
    assert default_project(path, folder) == project
    assert parse("# T\n", path, folder, FLOWS).project == project


def test_front_matter_project_wins_over_the_folder() -> None:
    ticket = parsed('+++\nproject = "ops"\n+++\n', path="tickets/billing/x.md")
    assert ticket.project == "ops"


@pytest.mark.parametrize(
    "name", ["a", "A1", "fix-login", "fix.login", "fix_login", "2026-01-rollout", "T2a", "RT1"]
)
def test_names_that_can_name_a_ticket(name: str) -> None:
    assert parsed("# T\n", path=f"tickets/{name}.md").name == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("-fix", "it starts with '-'"),
        (".hidden", "it starts with '.'"),
        ("_x", "it starts with '_'"),
        ("fix login", "it contains ' '"),
        ("fix+login", "it contains '+'"),
        ("café", "it contains 'é'"),
        ("a#1", "it contains '#'"),
        ("a@{1}", "it contains '@'"),
        ("fix..login", "it contains '..'"),
        ("fix.", "it ends in '.'"),
        ("fix.lock", "it ends in '.lock'"),
        ("T2", "it looks like a ticket, run or trigger id"),
        ("R1", "it looks like a ticket, run or trigger id"),
        ("TR4", "it looks like a ticket, run or trigger id"),
    ],
)
def test_names_that_cannot_name_a_ticket(name: str, why: str) -> None:
    path = f"tickets/{name}.md"
    err = refusal("# T\n", path=path)
    assert err.message.startswith(f"{path}: the file name '{name}' cannot name a ticket: {why}")
    assert "(a name is letters, digits" in err.message  # the rule, named
    assert err.details == {"path": path}


# --- refusals with their file line ----------------------------------------------------


def test_unclosed_front_matter_names_line_1() -> None:
    message = line_refusal('+++\nflow = "default"\n# Title\n', 1)
    assert "never closed" in message


def test_invalid_toml_names_the_file_line() -> None:
    text = '+++\nflow = "default"\npriority = = 2\n+++\n# T\n'
    message = line_refusal(text, 3)
    assert "front matter is not valid TOML" in message


def test_invalid_toml_on_the_first_front_matter_line_is_line_2() -> None:
    line_refusal("+++\nthis is not toml\n+++\n", 2)


def test_invalid_toml_at_the_end_of_the_front_matter_names_its_last_line() -> None:
    message = line_refusal("+++\npriority = 1\nflow =\n+++\n# T\n", 3)
    assert message.count("(") == message.count(")")


def test_unknown_key_names_the_line_of_that_key() -> None:
    text = '+++\nflow = "default"\n\nowner = "me"\n+++\n# T\n'
    message = line_refusal(text, 4)
    assert "unknown front matter key 'owner'" in message
    assert "flow, project, priority" in message


def test_unknown_quoted_key_names_its_line() -> None:
    message = line_refusal('+++\npriority = 1\n"labels" = []\n+++\n', 3)
    assert "'labels'" in message


@pytest.mark.parametrize(
    ("front", "line"),
    [
        ("priority = 1\n\n[extra]\nx = 1", 4),
        ("priority = 1\n[[extras]]\nx = 1", 3),
        ('priority = 1\nmeta.owner = "me"', 3),
        ('priority = 1\n  "meta" . owner = "me"', 3),
    ],
)
def test_unknown_table_or_dotted_key_names_its_line(front: str, line: int) -> None:
    line_refusal(f"+++\n{front}\n+++\n# T\n", line)


@pytest.mark.parametrize(
    ("assignment", "complaint"),
    [
        ('priority = "high"', "'priority' must be an integer"),
        ("priority = 1.5", "'priority' must be an integer"),
        ("priority = true", "'priority' must be an integer"),
        ("flow = 3", "'flow' must be a string"),
        ("project = []", "'project' must be a string"),
        ('project = ""', "'project' must not be empty"),
        ('project = "   "', "'project' must not be empty"),
        ('flow = ""', "'flow' must not be empty"),
    ],
)
def test_wrong_types_name_the_line_of_the_key(assignment: str, complaint: str) -> None:
    message = line_refusal(f"+++\n# a TOML comment\n{assignment}\n+++\n# T\n", 3)
    assert complaint in message


def test_unknown_flow_names_its_line_and_the_known_flows() -> None:
    text = '+++\npriority = 1\nflow = "turbo"\n+++\n# T\n'
    with pytest.raises(ProtocolError) as caught:
        parse(text, "tickets/x.md", TICKETS, {"default", "fast"})
    err = caught.value
    assert err.code == ErrorCode.INVALID_ARGUMENTS
    assert err.message.startswith("tickets/x.md:3: unknown flow 'turbo'")
    assert "default, fast" in err.message
    assert err.details == {"path": "tickets/x.md", "line": 3}


def test_a_flow_defined_in_sloop_toml_is_known() -> None:
    assert parse(
        '+++\nflow = "fast"\n+++\n', "tickets/x.md", TICKETS, {"default", "fast"}
    ).flow == ("fast")


# --- reading the file --------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "tickets" / "billing").mkdir(parents=True)
    return root


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def read_refusal(repo: Path, given: str) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        read(repo, TICKETS, given, FLOWS)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENTS
    return caught.value


def test_read_takes_relative_and_absolute_paths(repo: Path) -> None:
    target = write(repo / "tickets/billing/fix.md", "# Fix\nbody\n")
    relative = read(repo, TICKETS, "tickets/billing/fix.md", FLOWS)
    absolute = read(repo, TICKETS, str(target), FLOWS)
    assert relative == absolute
    assert (relative.path, relative.name, relative.project) == (
        "tickets/billing/fix.md",
        "fix",
        "billing",
    )


def test_read_accepts_markdown_anywhere_in_the_repository(repo: Path) -> None:
    write(repo / "docs/plan.markdown", "# Plan\n")
    write(repo / "UPPER.MD", "# Upper\n")
    assert read(repo, TICKETS, "docs/plan.markdown", FLOWS).path == "docs/plan.markdown"
    assert read(repo, TICKETS, "UPPER.MD", FLOWS).name == "UPPER"


def test_read_refuses_a_missing_file(repo: Path) -> None:
    err = read_refusal(repo, "tickets/nope.md")
    assert err.message == "tickets/nope.md: no such file"
    assert err.details == {"path": "tickets/nope.md"}


def test_read_refuses_a_folder_named_like_markdown(repo: Path) -> None:
    (repo / "tickets/dir.md").mkdir()
    assert read_refusal(repo, "tickets/dir.md").message.endswith("no such file")


def test_read_refuses_what_is_not_markdown(repo: Path) -> None:
    write(repo / "tickets/notes.txt", "# Notes\n")
    err = read_refusal(repo, "tickets/notes.txt")
    assert "not a Markdown file" in err.message
    assert err.details == {"path": "tickets/notes.txt"}


def test_read_refuses_paths_outside_the_repository(repo: Path, tmp_path: Path) -> None:
    outside = write(tmp_path / "outside.md", "# Out\n")
    for path in (str(outside), "../outside.md", "tickets/../../outside.md"):
        err = read_refusal(repo, path)
        assert "outside the repository" in err.message, path
        assert err.details == {"path": path}


def test_a_symlink_pointing_outside_is_outside(repo: Path, tmp_path: Path) -> None:
    outside = write(tmp_path / "outside.md", "# Out\n")
    os.symlink(outside, repo / "tickets/link.md")
    assert "outside the repository" in read_refusal(repo, "tickets/link.md").message


def test_a_symlink_inside_is_read_as_its_target(repo: Path) -> None:
    write(repo / "tickets/real.md", "# Real\n")
    os.symlink(repo / "tickets/real.md", repo / "tickets/alias.md")
    ticket = read(repo, TICKETS, "tickets/alias.md", FLOWS)
    assert (ticket.path, ticket.name, ticket.title) == ("tickets/real.md", "real", "Real")


def test_read_refuses_bad_utf8_naming_the_line(repo: Path) -> None:
    (repo / "tickets/bad.md").write_bytes(b"# Fine\nfine\n\xff\xfe broken\nmore\n")
    err = read_refusal(repo, "tickets/bad.md")
    assert err.message == "tickets/bad.md:3: not valid UTF-8"
    assert err.details == {"path": "tickets/bad.md", "line": 3}


def test_a_byte_order_mark_does_not_hide_the_front_matter(repo: Path) -> None:
    (repo / "tickets/bom.md").write_bytes(b"\xef\xbb\xbf+++\npriority = 5\n+++\n# Title\n")
    ticket = read(repo, TICKETS, "tickets/bom.md", FLOWS)
    assert (ticket.priority, ticket.title, ticket.body) == (5, "Title", "")


def test_read_reports_parse_errors_with_the_repository_relative_path(repo: Path) -> None:
    target = write(repo / "tickets/x.md", '+++\nowner = "me"\n+++\n')
    err = read_refusal(repo, str(target))
    assert err.message.startswith("tickets/x.md:2: unknown front matter key 'owner'")
    assert err.details == {"path": "tickets/x.md", "line": 2}


# --- property: what goes into a file comes back out ---------------------------------------

NAMES = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,20}\Z").filter(
    lambda name: ticket_name_problem(name) is None
)
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ABC0123456789", min_size=1, max_size=30)
PROJECTS = st.from_regex(r"\A[a-z][a-z0-9-]{0,10}\Z")


@given(
    name=NAMES,
    title=WORDS.filter(lambda t: t.strip() != ""),
    body=st.lists(WORDS, max_size=4),
    priority=st.integers(min_value=-(2**31), max_value=2**31),
    project=st.none() | PROJECTS,
    folder=st.none() | PROJECTS,
)
def test_round_trip(
    name: str,
    title: str,
    body: list[str],
    priority: int,
    project: str | None,
    folder: str | None,
) -> None:
    front = [f"priority = {priority}"] + ([f'project = "{project}"'] if project else [])
    text = "+++\n" + "\n".join(front) + "\n+++\n" + f"# {title}\n" + "\n".join(body) + "\n"
    path = f"tickets/{folder}/{name}.md" if folder else f"tickets/{name}.md"
    ticket = parsed(text, path=path)
    assert ticket.name == name
    assert ticket.title == title.strip()
    assert ticket.body == "\n".join(body).strip("\n")
    assert ticket.priority == priority
    assert ticket.project == (project or folder or "default")
    assert ticket.flow == "default"
