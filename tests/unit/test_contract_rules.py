"""Issue 35's "done when", kept: each rule fails here if the shape it removed came back.

* ``runs/execute.py`` names no backend: where a child runs is its placement's
  (``runs.placing``), decided once, never asked again by the executor.
* ``sloopd/remote/`` reads no message by string key outside its schema
  (``messages``, ``codec``): every pipe speaks typed values.
* ``runs/`` is the run driver, at most 2,600 lines.
* One pipe reader and exit watch: only ``util.pipes`` watches a descriptor on the loop.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.unit.test_architecture import ROOT

SLOOPD = ROOT / "sloopd"
SCHEMA = {"messages.py", "codec.py"}
# String-keyed reads that are not messages: Ray's own node table, the environment.
NOT_MESSAGES = {
    ("connection.py", "node"),  # ray.nodes()' dicts
    ("node.py", "values"),  # the daemon's variable values, a plain mapping
    ("node.py", "os.environ"),
    ("room.py", "os.environ"),
}


def _code(path: Path) -> str:
    """The module without its docstrings and comments: what it does, not what it says."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        if docstring and isinstance(body, list) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def test_the_executor_names_no_backend() -> None:
    code = _code(SLOOPD / "runs" / "execute.py")
    assert re.findall(r"(?i)\b(ray|backend|remote)\b", code) == []


def _string_keyed_reads(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        receiver: ast.expr | None = None
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            receiver = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            receiver = node.func.value
        if receiver is not None and (path.name, ast.unparse(receiver)) not in NOT_MESSAGES:
            found.append((ast.unparse(receiver), getattr(node, "lineno", 0)))
    return found


def test_the_remote_side_reads_messages_only_through_its_schema() -> None:
    reads = {
        path.name: found
        for path in sorted((SLOOPD / "remote").glob("*.py"))
        if path.name not in SCHEMA and (found := _string_keyed_reads(path))
    }
    assert reads == {}


def test_the_run_driver_stays_within_its_size() -> None:
    lines = sum(
        len(p.read_text(encoding="utf-8").splitlines()) for p in (SLOOPD / "runs").glob("*.py")
    )
    assert lines <= 2600, f"sloopd/runs/ holds {lines} lines"


def test_only_the_pipe_reader_watches_descriptors_on_the_loop() -> None:
    watchers = sorted(
        str(path.relative_to(ROOT)) for path in SLOOPD.rglob("*.py") if "add_reader(" in _code(path)
    )
    assert watchers == ["sloopd/util/pipes.py"]
