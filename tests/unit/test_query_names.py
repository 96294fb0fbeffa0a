"""Every query is called by its whole name, so grep finds its callers.

``queries.sql`` names each query once; Python passes that name to the store
(``store.one("run_by_id", …)``).  A name composed at run time
(``f"events_{scope}_page"``) hides its callers from ``grep -rn '"events_run_page"'``,
so composed names come from tables that spell each name out
(``views.eventpages.EVENT_QUERIES``, ``views.logpages.LOG_QUERIES``), and this
test scans the daemon's source for any other way of building one.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

from sloopd.store.queries import QUERIES
from sloopd.views.eventpages import EVENT_QUERIES
from sloopd.views.logpages import LOG_QUERIES

ROOT = Path(__file__).resolve().parents[2]
SLOOPD = ROOT / "sloopd"

# The store's query-taking methods (``Store``, ``Transaction`` and ``NamedReads``)
# and where each takes the query's name.
STORE_METHODS = {
    "one": 0,
    "all": 0,
    "run": 0,
    "run_many": 0,
    "insert_many": 0,
    "scalar": 0,
    "row": 1,
    "rows": 1,
}
# A parameter by this name (or ending ``_query``) is a query's name, handed on to the store.
QUERY_PARAMETER = re.compile(r"^(query|\w+_query)$")


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    name: str | None  # the literal name; None when the argument is an expression
    node: ast.expr


def sources() -> list[Path]:
    return sorted(SLOOPD.rglob("*.py"))


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def query_parameters(trees: dict[Path, ast.Module]) -> dict[str, int]:
    """Functions of the daemon that take a query's name: their name -> its argument index."""
    found: dict[str, int] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            names = [a.arg for a in node.args.posonlyargs + node.args.args]
            if names and names[0] in ("self", "cls"):
                names = names[1:]
            for index, name in enumerate(names):
                if QUERY_PARAMETER.match(name) and node.name not in STORE_METHODS:
                    found[node.name] = index
    return found


def query_arguments(trees: dict[Path, ast.Module]) -> Iterator[Use]:
    """Every argument the daemon passes where a query's name goes."""
    takers = {**query_parameters(trees), **STORE_METHODS}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called not in takers:
                continue
            candidates = [
                kw.value for kw in node.keywords if kw.arg and QUERY_PARAMETER.match(kw.arg)
            ]
            index = takers[called]
            if index < len(node.args):
                candidates.append(node.args[index])
            for arg in candidates:
                literal = arg.value if isinstance(arg, ast.Constant) else None
                yield Use(
                    relative(path), node.lineno, literal if isinstance(literal, str) else None, arg
                )


def composed(node: ast.expr) -> bool:
    """Whether an argument builds a string: an f-string, ``+``/``%``, ``format``, ``join``."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.JoinedStr):
            return True
        if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Add | ast.Mod):
            return True
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and inner.func.attr in ("format", "join")
        ):
            return True
    return False


def fstring_pattern(node: ast.JoinedStr) -> re.Pattern[str] | None:
    """What an f-string can spell (its text, any value in each hole); None if it is all holes."""
    parts = []
    literal = False
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(re.escape(value.value))
            literal = literal or bool(value.value.strip())
        else:
            # One word per hole: a composed name's holes fill in a word
            # (``events_{scope}_page``, ``{kind}_tail_start``), and a hole allowed
            # underscores would match prose such as f"{state}_ticket".
            parts.append(r"[a-z]+")
    return re.compile("".join(parts)) if literal else None


def table_names() -> set[str]:
    """The query names the composing tables spell out."""
    names = set(EVENT_QUERIES.values())
    for queries in LOG_QUERIES.values():
        names.update(
            value for f in fields(queries) if isinstance(value := getattr(queries, f.name), str)
        )
    return names


@functools.cache
def parsed() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sources()}


def test_the_scan_sees_the_store_calls() -> None:
    literals = {use.name for use in query_arguments(parsed()) if use.name}
    # A scan that found nothing would pass everything below.
    assert {"run_by_id", "stage_log_append", "log_insert", "log_max_position"} <= literals


def test_every_query_name_the_daemon_uses_is_defined() -> None:
    uses = [u for u in query_arguments(parsed()) if u.name is not None]
    unknown = [f"{u.path}:{u.line}: {u.name}" for u in uses if u.name not in QUERIES]
    unknown += [f"a table names {name}" for name in sorted(table_names() - set(QUERIES))]
    assert unknown == []


def test_no_query_name_is_built_at_run_time() -> None:
    trees = parsed()
    built = [
        f"{u.path}:{u.line}: {ast.unparse(u.node)}"
        for u in query_arguments(trees)
        if composed(u.node)
    ]
    # Nor anywhere else: an f-string that could spell a query's name, kept in a
    # variable first, hides it from grep just the same.
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr) and (pattern := fstring_pattern(node)):
                spelled = sorted(q for q in QUERIES if pattern.fullmatch(q))
                if spelled:
                    built.append(f"{relative(path)}:{node.lineno}: {ast.unparse(node)} {spelled}")
    assert built == []


def test_every_defined_query_is_used() -> None:
    trees = parsed()
    used = {u.name for u in query_arguments(trees) if u.name is not None} | table_names()
    # A name may also reach the store as a value (a default, a tuple of choices):
    # any whole string of the daemon's outside the store itself counts.
    for path, tree in trees.items():
        if path.is_relative_to(SLOOPD / "store"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.add(node.value)
    assert sorted(set(QUERIES) - used) == []


def test_the_composing_tables_name_each_query_once() -> None:
    names = list(EVENT_QUERIES.values())
    for queries in LOG_QUERIES.values():
        names += [getattr(queries, f.name) for f in fields(queries)]
    spelled = [n for n in names if n is not None]
    assert len(spelled) == len(set(spelled))
