"""The one rule for the names Sloop builds refs, paths and selectors from.

A ticket's name becomes a branch component (``<branch_prefix><name>/<attempt>``)
and the left half of a run alias (``<name>#<attempt>``); a stage's name becomes
part of a prompt file's name and of ``logs`` selectors (``<stage>#<attempt>``); a
flow's name is a metrics label and a front matter value.  Every name the rule
accepts is a valid git ref component (``git check-ref-format``), a plain file
name, and free of the ``#`` that selectors and aliases split on.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 100
NAME_RULE = (
    "letters, digits, '.', '_' and '-', starting with a letter or digit, "
    f"without '..', not ending in '.' or '.lock', at most {MAX_NAME_LENGTH} characters"
)
_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
# Ticket, run and trigger ids; a ticket named like one would shadow it (or be
# shadowed by it) in the reference ladder.  The ladder's id rungs match case-
# sensitively (``t1`` is no id), and so does this.
_ID_SHAPE = re.compile(r"(?:T|R|TR)[0-9]+\Z")
# What git refuses anywhere in a ref name (check-ref-format rules 3-5, 8).
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def name_problem(name: str) -> str | None:
    """Why ``name`` breaks the naming rule (a short phrase), or None when it keeps it."""
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"it is longer than {MAX_NAME_LENGTH} characters"
    if not _SHAPE.match(name):
        if not name[0].isascii() or not name[0].isalnum():
            return f"it starts with {name[0]!r}"
        bad = next(ch for ch in name if not (ch.isascii() and (ch.isalnum() or ch in "._-")))
        return f"it contains {bad!r}"
    if ".." in name:
        return "it contains '..'"
    if name.endswith("."):
        return "it ends in '.'"
    if name.lower().endswith(".lock"):
        return "it ends in '.lock'"
    return None


def ticket_name_problem(name: str) -> str | None:
    """``name_problem``, and a name shaped like a ticket, run or trigger id."""
    problem = name_problem(name)
    if problem is None and _ID_SHAPE.match(name):
        problem = "it looks like a ticket, run or trigger id (T<n>, R<n>, TR<n>)"
    return problem


def ref_problem(ref: str) -> str | None:
    """Why git would refuse ``ref`` as a ref name (``git check-ref-format``), or None."""
    if not ref or ref == "@":
        return "it is empty or '@'"
    found = _REF_FORBIDDEN.search(ref)
    if found:
        return f"it contains {found.group()!r}"
    if ref.startswith("/") or ref.endswith(("/", ".")):
        return "it starts with '/' or ends with '/' or '.'"
    for component in ref.split("/"):
        if component.startswith("."):
            return f"the component {component!r} starts with '.'"
        if component.endswith(".lock"):
            return f"the component {component!r} ends in '.lock'"
    return None
