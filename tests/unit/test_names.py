"""The naming rule (``sloopd.util.names``), checked against git itself.

Every ticket name ``post`` accepts becomes the branch ``<branch_prefix><name>/<attempt>``
and every stage name a file name and a ``logs`` selector, so whatever the rule lets
through must be a ref ``git check-ref-format`` accepts.  The generated names lean on
what git is fussy about: dots, ``.lock``, ``@{``, slashes, control characters.
"""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sloopd.queue.tickets import parse
from sloopd.util.names import MAX_NAME_LENGTH, name_problem, ref_problem, ticket_name_problem
from sloopd.wire.api import ProtocolError


def git_accepts(ref: str) -> bool:
    done = subprocess.run(["git", "check-ref-format", ref], capture_output=True, check=False)
    return done.returncode == 0


# Characters git treats specially, a few ordinary ones, and some beyond ASCII.
FUSSY = st.sampled_from(
    [
        *"aZ09._-~^:?*[\\",
        *(".", ".", "lock", ".lock", "@", "@{", "{", "/", "#", " ", "\t", "\x7f", "\x01"),
        *("é", "..", "R", "T", "1"),
    ]
)
fussy_text = st.lists(FUSSY, min_size=1, max_size=12).map("".join)


@pytest.mark.parametrize(
    "name", ["a", "A1", "fix-login", "fix.login", "fix_login", "2026-01-rollout", "v1.2", "x.locks"]
)
def test_names_the_rule_accepts(name: str) -> None:
    assert name_problem(name) is None
    assert ticket_name_problem(name) is None
    assert git_accepts(f"refs/heads/sloop/{name}/1")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "it is empty"),
        ("-fix", "it starts with '-'"),
        (".hidden", "it starts with '.'"),
        ("_x", "it starts with '_'"),
        ("fix login", "it contains ' '"),
        ("a/b", "it contains '/'"),
        ("a#1", "it contains '#'"),
        ("a@{1}", "it contains '@'"),
        ("tab\there", "it contains '\\t'"),
        ("café", "it contains 'é'"),
        ("a..b", "it contains '..'"),
        ("trailing.", "it ends in '.'"),
        ("branch.lock", "it ends in '.lock'"),
        ("branch.LOCK", "it ends in '.lock'"),
        ("x" * (MAX_NAME_LENGTH + 1), f"it is longer than {MAX_NAME_LENGTH} characters"),
    ],
)
def test_names_the_rule_refuses_say_why(name: str, problem: str) -> None:
    assert name_problem(name) == problem


@pytest.mark.parametrize("name", ["T1", "R1", "TR4", "T0", "R007", "TR12"])
def test_ticket_names_shaped_like_ids_are_refused(name: str) -> None:
    assert name_problem(name) is None  # a fine stage or flow name ...
    assert "looks like a ticket, run or trigger id" in (ticket_name_problem(name) or "")


@pytest.mark.parametrize(
    "name", ["T", "R", "TR", "T1a", "RT1", "TRR1", "T-1", "R1.md2", "t1", "r12", "Tr7"]
)
def test_names_that_only_resemble_ids_are_fine(name: str) -> None:
    # The ladder's id rungs are case-sensitive: ``t1`` resolves by name, never as an id.
    assert ticket_name_problem(name) is None


@settings(max_examples=300, deadline=None)
@given(fussy_text)
@example("a..b")
@example("x.lock")
@example("a@{b")
@example("end.")
def test_every_name_the_rule_accepts_makes_a_valid_branch(name: str) -> None:
    if name_problem(name) is None:
        for ref in (f"refs/heads/sloop/{name}/1", f"refs/heads/{name}", f"refs/heads/x/{name}"):
            assert git_accepts(ref), (name, ref)


@settings(max_examples=200, deadline=None)
@given(fussy_text)
def test_every_file_name_post_accepts_makes_a_valid_branch(stem: str) -> None:
    """Through the ticket parser itself: a file stem it takes is a valid branch component."""
    if "/" in stem or stem in (".", ".."):
        return  # not a file name
    try:
        ticket = parse("# T\n", f"tickets/{stem}.md", "tickets", {"default"})
    except ProtocolError:
        return
    assert git_accepts(f"refs/heads/sloop/{ticket.name}/1"), ticket.name
    assert "#" not in ticket.name  # a run alias splits on it


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(FUSSY, st.just("/")), min_size=1, max_size=10).map("".join))
@example("refs/heads/a..b")
@example("refs/heads/.x")
@example("refs/heads/x.lock/1")
@example("refs/heads//x")
@example("@")
def test_ref_problem_agrees_with_git(tail: str) -> None:
    ref = tail if tail == "@" else f"refs/heads/{tail}"
    assert (ref_problem(ref) is None) == git_accepts(ref), (ref, ref_problem(ref))
