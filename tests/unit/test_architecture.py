"""DESIGN "Architecture rules", checked on the source: who may import what.

1. Only the store package opens database connections: no module outside
   ``sloopd/store`` imports ``apsw`` or ``sqlite3``.
3. One schema for every client: ``sloopctl`` imports nothing from the daemon
   but ``sloopd.wire.api``, and that module imports nothing else from ``sloopd``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATABASE_MODULES = frozenset({"apsw", "sqlite3"})
CLIENT_MAY_IMPORT = frozenset({"sloopd", "sloopd.wire", "sloopd.wire.api"})
SCHEMA_MODULE = "sloopd/wire/api.py"

# Each layer (a subpackage of sloopd) and the layers it may import, besides
# itself, lowest first; docs/architecture.md draws the same table.  Modules
# directly in sloopd/ are the composition root: they may import every layer,
# and no layer may import them.
LAYERS: dict[str, frozenset[str]] = {
    "wire": frozenset(),
    "store": frozenset(),
    "util": frozenset(),
    # The configuration's error base (sloopd.util.validate) for [pricing] and
    # [[vendor.patterns]].
    "vendor": frozenset({"util"}),
    "examples": frozenset(),
    "flows": frozenset({"wire", "store", "util", "vendor"}),
    "ops": frozenset({"wire", "store", "util"}),
    # core reads git (the layout) and, for the agent CLIs' sight, the sandbox's rules (proc).
    "core": frozenset({"wire", "store", "util", "vendor", "flows", "ops", "proc", "git"}),
    "queue": frozenset({"wire", "store", "util", "flows", "core"}),
    # The merge queue (0.9): decisions over runs' landings, driven by the runs layer;
    # main's slot, and the watch that resolves runs merged by hand (git, queue).
    "landing": frozenset({"wire", "store", "util", "flows", "core", "queue", "git"}),
    "views": frozenset({"wire", "store", "util", "flows", "core", "queue", "git"}),
    "proc": frozenset({"util"}),
    "git": frozenset({"util", "proc"}),
    # The worker socket and its verbs: they read a run as show does (views, queue's
    # references) and append to its stage log (store, flows), never through runs.
    "worker": frozenset({"wire", "store", "util", "flows", "core", "queue", "views", "proc"}),
    "runs": frozenset(
        {
            "wire",
            "store",
            "util",
            "vendor",
            "flows",
            "core",
            "queue",
            "landing",
            "views",
            "proc",
            "git",
            "worker",
        }
    ),
    # Continuing the runs a stopped daemon left in flight (issue 38): above the driver,
    # which it hands them to; only the composition root imports it.
    "resume": frozenset(
        {"wire", "store", "util", "vendor", "flows", "core", "git", "landing", "runs"}
    ),
    # Stages on Ray: the daemon's side (launcher, child, cluster_gate) and the node's
    # (node, room, relay) over the same launchers (proc) and workspace (git) as a
    # stage on the daemon's host; never the runs layer, which reaches it only
    # through the ``stage_io.Launcher`` seam the composition root hands it.
    "remote": frozenset({"wire", "store", "util", "flows", "core", "queue", "proc", "git"}),
}


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # absolute dotted name
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str, root: Path) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(source: str, name: str, is_package: bool, root: Path = ROOT) -> Iterator[Import]:
    """Every module a source file imports, relative imports made absolute.

    ``from pkg import name`` counts as importing ``pkg.name`` when that is a
    module, else ``pkg``.  ``importlib.import_module("x")`` and
    ``__import__("x")`` with a literal name count too.
    """
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield Import(candidate if _is_module(candidate, root) else base, node.lineno)
        elif isinstance(node, ast.Call) and _dynamic_import(node):
            first = node.args[0]
            assert isinstance(first, ast.Constant)
            assert isinstance(first.value, str)
            yield Import(first.value, node.lineno)


def _dynamic_import(node: ast.Call) -> bool:
    func = node.func
    named = (isinstance(func, ast.Name) and func.id in {"__import__", "import_module"}) or (
        isinstance(func, ast.Attribute) and func.attr == "import_module"
    )
    return (
        named
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def source_files(package: str) -> list[Path]:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no Python files found under {package}/"
    return files


def file_imports(path: Path, root: Path = ROOT) -> list[Import]:
    source = path.read_text(encoding="utf-8")
    return list(imports_of(source, module_name(path, root), path.name == "__init__.py", root))


def top(module: str) -> str:
    return module.split(".")[0]


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# --- the rules ---------------------------------------------------------------------


def database_imports_outside_store(files: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in files:
        if under(module_name(path, root), "sloopd.store"):
            continue
        for imp in file_imports(path, root):
            if top(imp.module) in DATABASE_MODULES:
                found.append(f"{path.relative_to(root)}:{imp.line} imports {imp.module}")
    return found


def daemon_imports_in_client(files: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in files:
        for imp in file_imports(path, root):
            if top(imp.module) == "sloopd" and imp.module not in CLIENT_MAY_IMPORT:
                found.append(f"{path.relative_to(root)}:{imp.line} imports {imp.module}")
    return found


def test_only_the_store_package_imports_a_database_driver() -> None:
    files = source_files("sloopd") + source_files("sloopctl")
    assert any(under(module_name(p), "sloopd.store") for p in files)
    assert database_imports_outside_store(files) == []


def test_the_store_package_is_where_the_driver_is_used() -> None:
    # Guards the rule above against passing vacuously (e.g. a broken walk).
    store_files = [p for p in source_files("sloopd") if under(module_name(p), "sloopd.store")]
    modules = {top(imp.module) for path in store_files for imp in file_imports(path)}
    assert "apsw" in modules


def test_sloopctl_imports_nothing_from_the_daemon_but_the_schema_module() -> None:
    files = source_files("sloopctl")
    assert daemon_imports_in_client(files) == []


def test_the_schema_module_imports_no_other_sloopd_module() -> None:
    found = [imp.module for imp in file_imports(ROOT / SCHEMA_MODULE)]
    assert [m for m in found if top(m) == "sloopd"] == []
    assert not DATABASE_MODULES & {top(m) for m in found}


def test_the_sloopd_package_init_only_pulls_in_the_schema_module() -> None:
    # Every `from sloopd import api` runs sloopd/__init__.py first, so what it
    # imports is imported by every client too.
    found = {imp.module for imp in file_imports(ROOT / "sloopd" / "__init__.py")}
    assert {m for m in found if top(m) == "sloopd"} <= CLIENT_MAY_IMPORT
    assert not DATABASE_MODULES & {top(m) for m in found}


def unmeasured_environment() -> dict[str, str]:
    """This environment without coverage's: `make coverage` measures subprocesses by
    starting coverage in them, and coverage keeps its data in sqlite3."""
    return {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}


def test_importing_every_sloopctl_module_loads_no_daemon_module() -> None:
    """The same rule at run time, transitively, in a fresh interpreter."""
    modules = sorted(module_name(p) for p in source_files("sloopctl"))
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(','.join(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('sloopd', 'apsw', 'sqlite3', '_sqlite3'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=unmeasured_environment(),
    )
    assert done.returncode == 0, done.stderr
    loaded = set(filter(None, done.stdout.strip().split(",")))
    assert loaded <= CLIENT_MAY_IMPORT, loaded


def layer_of(module: str) -> str | None:
    """The layer a ``sloopd`` module belongs to; None for the composition root."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    return None


def forbidden_layer_edges(files: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in files:
        me = module_name(path, root)
        mine = layer_of(me)
        for imp in file_imports(path, root):
            if top(imp.module) != "sloopd" or imp.module == "sloopd":
                continue
            theirs = layer_of(imp.module)
            if mine is None or theirs == mine:
                continue  # the composition root may import anything; a layer itself
            if me == "sloopd" and imp.module.startswith("sloopd.wire"):
                continue
            if theirs is None or theirs not in LAYERS[mine]:
                what = "the composition root" if theirs is None else f"layer '{theirs}'"
                found.append(
                    f"{path.relative_to(root)}:{imp.line} ({mine}) imports {imp.module} ({what})"
                )
    return found


def import_circles(files: list[Path], root: Path = ROOT) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), sorted."""
    modules = {module_name(path, root): path for path in files}
    graph = {
        name: sorted(
            {imp.module for imp in file_imports(path, root)} & modules.keys() - {name, "sloopd"}
        )
        for name, path in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(circles)


def test_every_subpackage_of_sloopd_is_a_known_layer() -> None:
    packages = {p.parent.name for p in (ROOT / "sloopd").glob("*/__init__.py")}
    assert packages == set(LAYERS)


def test_every_layer_says_what_it_owns_and_may_import() -> None:
    for layer in LAYERS:
        doc = ast.get_docstring(ast.parse((ROOT / "sloopd" / layer / "__init__.py").read_text()))
        assert doc, f"sloopd/{layer}/__init__.py needs its docstring"
        assert "import" in doc, f"sloopd/{layer}/__init__.py needs its docstring"


def test_layers_import_only_what_they_are_allowed() -> None:
    assert forbidden_layer_edges(source_files("sloopd")) == []


def test_no_import_circle_joins_two_daemon_modules() -> None:
    assert import_circles(source_files("sloopd")) == []


# Modules allowed past the cap, each with the reason it stays whole.
LONG_ON_PURPOSE: dict[str, str] = {
    # DESIGN rule 3: the envelope, codes, verbs, shapes and the duration grammar both
    # sides read live in one module; splitting it would make two schema modules.
    "sloopd/wire/api.py": "the one schema module sloopctl imports",
}


def test_no_daemon_module_is_much_over_four_hundred_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in source_files("sloopd") + source_files("sloopctl")
        if (n := len(p.read_text().splitlines())) > 430
        and str(p.relative_to(ROOT)) not in LONG_ON_PURPOSE
    }
    assert long == {}
    assert all(len((ROOT / path).read_text().splitlines()) < 520 for path in LONG_ON_PURPOSE)


# --- the checker itself ----------------------------------------------------------------


@pytest.fixture
def fake_tree(tmp_path: Path) -> Path:
    for package in ("sloopd", "sloopd/store", "sloopctl"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    for module in ("sloopd/api.py", "sloopd/server.py", "sloopd/store/db.py"):
        (tmp_path / module).write_text("")
    return tmp_path


def _names(source: str, name: str, root: Path, is_package: bool = False) -> set[str]:
    return {imp.module for imp in imports_of(source, name, is_package, root)}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import apsw", {"apsw"}),
        ("import sqlite3.dbapi2 as d", {"sqlite3.dbapi2"}),
        ("from apsw import Connection", {"apsw"}),
        ("from sqlite3 import connect", {"sqlite3"}),
        ("def f():\n    import apsw\n", {"apsw"}),
        ("import importlib\nimportlib.import_module('apsw')", {"importlib", "apsw"}),
        ("__import__('sqlite3')", {"sqlite3"}),
        ("from sloopd import api, server", {"sloopd.api", "sloopd.server"}),
        ("from sloopd import __version__", {"sloopd"}),
        ("from sloopd.store import db", {"sloopd.store.db"}),
        ("from . import api", {"sloopd.api"}),
        ("from .store import db", {"sloopd.store.db"}),
        ("from .store.db import Store", {"sloopd.store.db"}),
    ],
)
def test_imports_are_resolved(fake_tree: Path, source: str, expected: set[str]) -> None:
    assert _names(source, "sloopd.server", fake_tree) == expected


def test_relative_imports_resolve_from_a_package_init(fake_tree: Path) -> None:
    assert _names("from . import db", "sloopd.store", fake_tree, is_package=True) == {
        "sloopd.store.db"
    }
    assert _names("from .. import api", "sloopd.store.db", fake_tree) == {"sloopd.api"}


def _layered_tree(tmp_path: Path, sources: dict[str, str]) -> list[Path]:
    for package in ("sloopd", *(f"sloopd/{layer}" for layer in LAYERS)):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    for module, source in sources.items():
        (tmp_path / module).write_text(source)
    return sorted((tmp_path / "sloopd").rglob("*.py"))


def test_a_forbidden_layer_edge_is_flagged(tmp_path: Path) -> None:
    files = _layered_tree(
        tmp_path,
        {
            "sloopd/server.py": "from sloopd.runs import runner\n",
            "sloopd/wire/api.py": "",
            "sloopd/runs/runner.py": "from sloopd.views import show\n",
            "sloopd/runs/gitops.py": "",
            "sloopd/views/show.py": "from sloopd.runs import gitops\nfrom sloopd.wire import api\n",
            "sloopd/queue/gate.py": "from sloopd import server\n",
        },
    )
    assert forbidden_layer_edges(files, tmp_path) == [
        "sloopd/queue/gate.py:1 (queue) imports sloopd.server (the composition root)",
        "sloopd/views/show.py:1 (views) imports sloopd.runs.gitops (layer 'runs')",
    ]


def test_the_machinery_layers_may_not_reach_up(tmp_path: Path) -> None:
    """proc, git and worker sit under runs: they may not import runs or what runs uses."""
    files = _layered_tree(
        tmp_path,
        {
            "sloopd/proc/children.py": (
                "from sloopd.runs import runner\nfrom sloopd.util import procfs\n"
            ),
            "sloopd/proc/sandbox.py": "from sloopd.git import runner\n",
            "sloopd/git/runner.py": (
                "from sloopd.proc import sandbox\nfrom sloopd.util import subproc\n"
            ),
            "sloopd/git/ops.py": "from sloopd.core import state\n",
            "sloopd/worker/sockets.py": (
                "from sloopd.wire import api\nfrom sloopd.runs import records\n"
            ),
            "sloopd/views/diff.py": (
                "from sloopd.git import runner\nfrom sloopd.proc import children\n"
            ),
            "sloopd/runs/runner.py": (
                "from sloopd.proc import children\nfrom sloopd.worker import sockets\n"
            ),
            "sloopd/runs/records.py": "",
            "sloopd/core/state.py": "",
            "sloopd/util/procfs.py": "",
            "sloopd/util/subproc.py": "",
            "sloopd/wire/api.py": "",
        },
    )
    assert forbidden_layer_edges(files, tmp_path) == [
        "sloopd/git/ops.py:1 (git) imports sloopd.core.state (layer 'core')",
        "sloopd/proc/children.py:1 (proc) imports sloopd.runs.runner (layer 'runs')",
        "sloopd/proc/sandbox.py:1 (proc) imports sloopd.git.runner (layer 'git')",
        "sloopd/views/diff.py:2 (views) imports sloopd.proc.children (layer 'proc')",
        "sloopd/worker/sockets.py:2 (worker) imports sloopd.runs.records (layer 'runs')",
    ]


def test_a_circle_is_flagged_even_behind_type_checking(tmp_path: Path) -> None:
    files = _layered_tree(
        tmp_path,
        {
            "sloopd/runs/runner.py": "from sloopd.runs import execute\n",
            "sloopd/runs/execute.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from sloopd.runs.runner import RunManager\n"
            ),
            "sloopd/runs/worker.py": "from sloopd.runs import execute\n",
        },
    )
    assert import_circles(files, tmp_path) == [["sloopd.runs.execute", "sloopd.runs.runner"]]
    (tmp_path / "sloopd/runs/execute.py").write_text("")
    assert import_circles(files, tmp_path) == []


def test_the_rules_flag_offending_modules(fake_tree: Path) -> None:
    (fake_tree / "sloopd" / "server.py").write_text("import apsw\n")
    (fake_tree / "sloopd" / "store" / "db.py").write_text("import apsw\n")
    (fake_tree / "sloopctl" / "__init__.py").write_text(
        "from sloopd.wire import api\nfrom sloopd.store import db\n"
    )
    daemon_files = sorted((fake_tree / "sloopd").rglob("*.py"))
    client_files = sorted((fake_tree / "sloopctl").rglob("*.py"))
    assert database_imports_outside_store(daemon_files, fake_tree) == [
        "sloopd/server.py:1 imports apsw"
    ]
    assert daemon_imports_in_client(client_files, fake_tree) == [
        "sloopctl/__init__.py:2 imports sloopd.store.db"
    ]


# --- the client's circles --------------------------------------------------------------


def test_no_import_circle_joins_two_client_modules() -> None:
    # A circle in sloopctl works only while its modules are imported in one order (the
    # old doctor -> diagnosis -> diagnosis.metrics -> doctor did, through a lazy import).
    assert import_circles(source_files("sloopctl")) == []


def test_a_circle_in_a_client_tree_is_flagged_even_through_a_lazy_import(tmp_path: Path) -> None:
    sources = {
        "sloopctl/__init__.py": "",
        "sloopctl/locate.py": "",
        "sloopctl/doctor.py": "def doctor():\n    from sloopctl.diagnosis import diagnose\n",
        "sloopctl/diagnosis/__init__.py": "from sloopctl.diagnosis.metrics import check\n",
        "sloopctl/diagnosis/metrics.py": "from sloopctl.doctor import METRICS_URL_ENV\n",
    }
    for module, source in sources.items():
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text(source)
    files = sorted((tmp_path / "sloopctl").rglob("*.py"))
    assert import_circles(files, tmp_path) == [
        ["sloopctl.diagnosis", "sloopctl.diagnosis.metrics", "sloopctl.doctor"]
    ]
    (tmp_path / "sloopctl/diagnosis/metrics.py").write_text(
        "from sloopctl.locate import METRICS_URL_ENV\n"
    )
    assert import_circles(files, tmp_path) == []


def test_docs_architecture_names_every_module() -> None:
    """A newcomer finds every module from docs/architecture.md: each is named there."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = [
        str(path.relative_to(ROOT))
        for path in source_files("sloopd") + source_files("sloopctl")
        if path.name != "__init__.py" and path.stem not in text
    ]
    assert unnamed == []
