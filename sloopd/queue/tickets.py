"""Ticket files: Markdown under the tickets folder, optional TOML front matter.

    +++
    flow = "default"
    project = "billing"
    priority = 2
    +++
    # Fix the invoice rounding

    The body: everything after the title line.

Every problem is reported as ``invalid_arguments`` naming the file and the
line, before anything is stored.  A file is read only when it is a regular file
no larger than the limit (``repo.max_ticket_bytes``), and never from the git or
the state directory (``sloopd.queue.places``).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sloopd.queue import places
from sloopd.util.names import NAME_RULE, ticket_name_problem
from sloopd.util.sizes import format_bytes
from sloopd.wire.api import MAX_INTEGER, ProtocolError, invalid_arguments

MARKDOWN_SUFFIXES = (".md", ".markdown")
FRONT_MATTER_FENCE = "+++"
DEFAULT_FLOW = "default"
DEFAULT_PROJECT = "default"
_FRONT_MATTER_KEYS = {"flow": str, "project": str, "priority": int}
# Every ticket row (the dashboard's too) carries the title and the project: one
# line each, not a second body.
MAX_TITLE_CHARS = 500
MAX_PROJECT_CHARS = 200
# Used when no limit is given (sloopd.core.config: repo.max_ticket_bytes).
DEFAULT_MAX_BYTES = 1 << 20
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


def locate(
    repo: Path, given: str, guarded: tuple[places.Place, ...] = (), missing: str = ""
) -> tuple[Path, str]:
    """The file's real path and its repository-relative path.

    ``given`` is absolute or relative to the repository root.  Symlinks are
    resolved first, so a link cannot smuggle a file from outside in, nor one
    from the ``guarded`` places (or any ``.git`` folder) inside.
    """
    candidate = Path(given)
    if not candidate.is_absolute():
        candidate = repo / candidate
    real = Path(os.path.realpath(candidate))
    root = Path(os.path.realpath(repo))
    if real != root and root not in real.parents:
        raise invalid_arguments(f"{given}: outside the repository {root}", path=given)
    place = places.refusal(real, root, guarded)
    if place is not None:
        shown = "" if real == candidate else f" (it resolves to {real})"
        raise invalid_arguments(
            f"{given}: inside {place.what} {place.root}{shown}; tickets are never read "
            "from the git directory or the state directory",
            path=given,
            rule=place.rule,
        )
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
        raise invalid_arguments(f"{given}: no such file{missing}", path=given)
    return real, real.relative_to(root).as_posix()


def read(
    repo: Path,
    tickets_folder: str,
    given: str,
    known_flows: set[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    guarded: tuple[places.Place, ...] = (),
    sha256: str | None = None,
) -> TicketFile:
    """The ticket ``given`` names.  ``sha256``: the client's digest of the file it read
    (a client in a container's host folder sends paths relative to the repository
    root): another file at that path in this repository is refused, not posted."""
    root = os.path.realpath(repo)
    elsewhere = ""
    if sha256 is not None:
        elsewhere = f" in the daemon's repository {root}; was it posted from another repository?"
    real, relative = locate(repo, given, guarded, elsewhere)
    data = _read_bounded(real, relative, max_bytes)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise invalid_arguments(
            f"{relative}: the daemon's repository {root} has another file at this path "
            "(its content differs from the file posted): was it posted from another "
            "repository, or changed while it was posted?",
            path=relative,
        )
    try:
        # utf-8-sig: an editor's byte order mark must not hide the front matter.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise invalid_arguments(
            f"{relative}:{line}: not valid UTF-8", path=relative, line=line
        ) from exc
    return parse(text, relative, tickets_folder, known_flows)


def _read_bounded(real: Path, relative: str, max_bytes: int) -> bytes:
    """The file's bytes, refused past ``max_bytes`` before they are read.

    Opened non-blocking and checked on the descriptor: a FIFO or device put in the
    file's place after ``locate`` neither blocks the open nor is read, and a file
    that grows after the check is still read no further than one byte past the limit.
    """
    try:
        descriptor = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise invalid_arguments(f"{relative}: cannot read: {exc.strerror}", path=relative) from exc
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise invalid_arguments(f"{relative}: not a regular file", path=relative)
        if status.st_size > max_bytes:
            raise _too_large(relative, status.st_size, max_bytes)
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise invalid_arguments(
                f"{relative}: cannot read: {exc.strerror}", path=relative
            ) from exc
    if len(data) > max_bytes:
        raise _too_large(relative, len(data), max_bytes)
    return data


def _too_large(relative: str, size: int, limit: int) -> ProtocolError:
    return invalid_arguments(
        f"{relative}: {format_bytes(size)} ({size} bytes) is over the ticket size limit of "
        f"{format_bytes(limit)} ({limit} bytes; repo.max_ticket_bytes in sloop.toml)",
        path=relative,
        size_bytes=size,
        limit_bytes=limit,
    )


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
    if len(title) > MAX_TITLE_CHARS:
        raise invalid_arguments(
            f"{relative}: the title is {len(title)} characters, over {MAX_TITLE_CHARS} "
            "(it is one line of every ticket row; put the rest in the body)",
            path=relative,
        )
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
        if key == "project" and isinstance(value, str) and len(value) > MAX_PROJECT_CHARS:
            raise invalid_arguments(
                f"{relative}:{line}: 'project' must be at most {MAX_PROJECT_CHARS} characters",
                path=relative,
                line=line,
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
