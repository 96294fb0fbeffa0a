"""Ticket files: Markdown under the tickets folder, optional TOML front matter.

    +++
    flow = "default"
    project = "billing"
    priority = 2
    +++
    # Fix the invoice rounding

    The body: everything after the title line.

Every problem is reported as ``invalid_arguments`` naming the file and the
line, before anything is stored.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sloopd.util.names import NAME_RULE, ticket_name_problem
from sloopd.wire.api import MAX_INTEGER, invalid_arguments

MARKDOWN_SUFFIXES = (".md", ".markdown")
FRONT_MATTER_FENCE = "+++"
DEFAULT_FLOW = "default"
DEFAULT_PROJECT = "default"
_FRONT_MATTER_KEYS = {"flow": str, "project": str, "priority": int}
_TOML_POSITION = re.compile(r"\s*\((?:at line (\d+), column (\d+)|at end of document)\)")


@dataclass(frozen=True, slots=True)
class TicketFile:
    name: str
    path: str  # relative to the repository root, POSIX separators
    title: str
    body: str
    flow: str
    project: str
    priority: int


def locate(repo: Path, given: str) -> tuple[Path, str]:
    """The file's real path and its repository-relative path.

    ``given`` is absolute or relative to the repository root.  Symlinks are
    resolved first, so a link cannot smuggle a file from outside in.
    """
    candidate = Path(given)
    if not candidate.is_absolute():
        candidate = repo / candidate
    real = Path(os.path.realpath(candidate))
    root = Path(os.path.realpath(repo))
    if real != root and root not in real.parents:
        raise invalid_arguments(f"{given}: outside the repository {root}", path=given)
    if real.suffix.lower() not in MARKDOWN_SUFFIXES:
        raise invalid_arguments(
            f"{given}: not a Markdown file (expected {' or '.join(MARKDOWN_SUFFIXES)})",
            path=given,
        )
    try:
        is_file = real.is_file()  # EACCES or ENAMETOOLONG raise: the path's fault
    except OSError as exc:
        raise invalid_arguments(f"{given}: cannot be read: {exc.strerror}", path=given) from exc
    if not is_file:
        raise invalid_arguments(f"{given}: no such file", path=given)
    return real, real.relative_to(root).as_posix()


def read(repo: Path, tickets_folder: str, given: str, known_flows: set[str]) -> TicketFile:
    real, relative = locate(repo, given)
    try:
        # utf-8-sig: an editor's byte order mark must not hide the front matter.
        text = real.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = real.read_bytes()[: exc.start].count(b"\n") + 1
        raise invalid_arguments(
            f"{relative}:{line}: not valid UTF-8", path=relative, line=line
        ) from exc
    except OSError as exc:
        raise invalid_arguments(f"{relative}: cannot read: {exc.strerror}", path=relative) from exc
    return parse(text, relative, tickets_folder, known_flows)


def parse(text: str, relative: str, tickets_folder: str, known_flows: set[str]) -> TicketFile:
    name = PurePosixPath(relative).stem
    # The name becomes a branch component and a run alias's left half, and it must
    # not shadow an id in the reference ladder (sloopd.util.names).
    problem = ticket_name_problem(name)
    if problem is not None:
        raise invalid_arguments(
            f"{relative}: the file name '{name}' cannot name a ticket: {problem} "
            f"(a name is {NAME_RULE}, and not shaped like an id)",
            path=relative,
        )
    meta, key_lines, body_lines = _split_front_matter(text, relative)
    title, body = _title_and_body(body_lines, name)
    flow = meta.get("flow", DEFAULT_FLOW)
    if flow not in known_flows:
        line = key_lines.get("flow", 1)
        raise invalid_arguments(
            f"{relative}:{line}: unknown flow '{flow}' "
            f"(sloop.toml defines: {', '.join(sorted(known_flows))})",
            path=relative,
            line=line,
        )
    project = meta.get("project") or default_project(relative, tickets_folder)
    return TicketFile(
        name=name,
        path=relative,
        title=title,
        body=body,
        flow=flow,
        project=project,
        priority=meta.get("priority", 0),
    )


def default_project(relative: str, tickets_folder: str) -> str:
    """The ticket's folder below the tickets folder, else ``default``."""
    parts = PurePosixPath(relative).parts
    folder = PurePosixPath(tickets_folder).parts
    if len(parts) > len(folder) + 1 and parts[: len(folder)] == folder:
        return parts[len(folder)]
    return DEFAULT_PROJECT


def _split_front_matter(
    text: str, relative: str
) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    """Front matter values, the file line of each key, and the lines after it."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != FRONT_MATTER_FENCE:
        return {}, {}, lines
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == FRONT_MATTER_FENCE)
    except StopIteration:
        raise invalid_arguments(
            f"{relative}:1: front matter opened with '+++' is never closed", path=relative, line=1
        ) from None
    source = "\n".join(lines[1:end])
    try:
        meta = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_POSITION.search(str(exc))
        # No line number is "at end of document": the front matter's last line.
        line = int(found.group(1)) + 1 if found is not None and found.group(1) else end
        reason = _TOML_POSITION.sub("", str(exc)).strip()
        raise invalid_arguments(
            f"{relative}:{line}: front matter is not valid TOML: {reason}", path=relative, line=line
        ) from exc
    key_lines = {key: _line_of_key(lines[1:end], key) + 1 for key in meta}
    for key, value in meta.items():
        line = key_lines[key]
        expected = _FRONT_MATTER_KEYS.get(key)
        if expected is None:
            raise invalid_arguments(
                f"{relative}:{line}: unknown front matter key '{key}' "
                "(known: flow, project, priority)",
                path=relative,
                line=line,
            )
        if isinstance(value, bool) or not isinstance(value, expected):
            kind = "an integer" if expected is int else "a string"
            raise invalid_arguments(
                f"{relative}:{line}: '{key}' must be {kind}", path=relative, line=line
            )
        if isinstance(value, int) and abs(value) > MAX_INTEGER:
            raise invalid_arguments(
                f"{relative}:{line}: '{key}' must be between -{MAX_INTEGER} and {MAX_INTEGER}",
                path=relative,
                line=line,
            )
        if isinstance(value, str) and not value.strip():
            raise invalid_arguments(
                f"{relative}:{line}: '{key}' must not be empty", path=relative, line=line
            )
    return meta, key_lines, lines[end + 1 :]


def _line_of_key(lines: list[str], key: str) -> int:
    """The front matter line that introduces ``key``: ``key = …``, ``key.x = …`` or ``[key]``."""
    for index, line in enumerate(lines, start=1):
        text = line.strip()
        if text.startswith("["):
            head = text.strip("[]").split(".", 1)[0].strip().strip("\"'")
        else:
            head = text.split("=", 1)[0].split(".", 1)[0].strip().strip("\"'")
        if head == key:
            return index
    return 1


def _title_and_body(lines: list[str], name: str) -> tuple[str, str]:
    for index, line in enumerate(lines):
        if line.startswith("# "):
            title = line[2:].strip()
            rest = lines[:index] + lines[index + 1 :]
            return title or name, "\n".join(rest).strip("\n")
    return name, "\n".join(lines).strip("\n")
