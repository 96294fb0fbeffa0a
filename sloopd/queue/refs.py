"""The reference ladder shared by ``show``, ``events`` scopes and the queue verbs.

Exact ticket id → run id → run alias → ticket name or path → ``project:<name>``
→ the case-insensitive pattern rung (substring, or an unanchored regular
expression when the text holds a metacharacter).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sloopd.store import Store, TicketRow
from sloopd.util.regex import Pattern, PatternError, compile_pattern
from sloopd.wire import api
from sloopd.wire.api import ErrorCode, ProtocolError

Kind = Literal["ticket", "run", "project"]


@dataclass(frozen=True, slots=True)
class Exact:
    kind: Kind
    key: str  # ticket id, run id, or project name


def resolve_exact(store: Store, repo: Path, ref: str) -> Exact | None:
    if api.TICKET_ID_RE.match(ref) and store.ticket_by_id(ref) is not None:
        return Exact("ticket", ref)
    if api.RUN_ID_RE.match(ref) and store.one("run_id_by_id", (ref,)):
        return Exact("run", ref)
    if "#" in ref:
        run = store.scalar("run_id_by_alias", (ref,))
        if run is not None:
            return Exact("run", str(run))
    ticket = ticket_by_name_or_path(store, repo, ref)
    if ticket is not None:
        return Exact("ticket", ticket)
    if ref.startswith(api.PROJECT_PREFIX):
        name = ref[len(api.PROJECT_PREFIX) :]
        if name and store.one("project_exists", (name,)):
            return Exact("project", name)
    return None


def ticket_by_name_or_path(store: Store, repo: Path, ref: str) -> str | None:
    row = store.row(TicketRow, "ticket_by_name", (ref,))
    if row is None:
        relative = repo_relative(repo, ref)
        if relative is not None:
            row = store.row(TicketRow, "ticket_by_path", (relative,))
    return row.id if row else None


def repo_relative(repo: Path, ref: str) -> str | None:
    """``ref`` as a repository-relative POSIX path, when it can be one."""
    candidate = Path(ref)
    if not candidate.is_absolute():
        candidate = repo / candidate
    normal = Path(os.path.normpath(candidate))
    try:
        return normal.relative_to(repo).as_posix()
    except ValueError:
        return None


def ticket_id(store: Store, repo: Path, ref: str) -> str:
    """A ticket reference (id, name or path) for the queue verbs; else not_found."""
    if api.TICKET_ID_RE.match(ref) and store.ticket_by_id(ref) is not None:
        return ref
    found = ticket_by_name_or_path(store, repo, ref)
    if found is None:
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no ticket matches '{ref}'", {"ref": ref})
    return found


def run_id(store: Store, repo: Path, ref: str) -> str:
    """A run reference (id or alias, by the ladder) for the run verbs; else not_found."""
    exact = resolve_exact(store, repo, ref)
    if exact is None or exact.kind != "run":
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no run matches '{ref}'", {"ref": ref})
    return exact.key


def pattern(ref: str, field: str = "ref") -> Pattern:
    """The pattern rung: metacharacters make a regex, anything else a substring.

    RE2 (``sloopd.util.regex``) compiles and matches it, in time linear in
    each name, so no pattern can stall the daemon's loop; what it refuses,
    it refuses as ``invalid_arguments`` with its reason.
    """
    regex = any(ch in api.REGEX_METACHARACTERS for ch in ref)
    try:
        return compile_pattern(ref, literal=not regex)
    except PatternError as exc:
        raise ProtocolError(
            ErrorCode.INVALID_ARGUMENTS,
            f"'{ref}' is not a valid regular expression: {exc}",
            {"field": field, field: ref},
        ) from exc


def matches(expression: Pattern, ticket_id: str, name: str) -> bool:
    return expression.search(ticket_id) or expression.search(name)
