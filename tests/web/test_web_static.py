"""The web view's files: shipped in the wheel, loaded without a build step, and free
of every way JavaScript has to parse a string as markup or code.

The browser tests show ticket markup rendered as text on the pages they visit;
this keeps every other page honest too, by reading the sources.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
import tomllib
from importlib import resources

from tests.support.daemon import REPO_ROOT

STATIC = resources.files("sloopctl.web").joinpath("static")
# Sinks that turn a string into markup or code; none may appear in the pages' code.
SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
    r"setAttribute\(\s*[\"'](on|style)|\.srcdoc|createContextualFragment|DOMParser"
)


def code_of(source: str) -> str:
    """The source without its comments (which may well name the sinks they avoid)."""
    source = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    return "\n".join(line for line in source.splitlines() if not line.strip().startswith("//"))


def static_names() -> list[str]:
    return sorted(entry.name for entry in STATIC.iterdir() if entry.is_file())


def test_every_page_file_is_package_data() -> None:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["sloopctl.web"]
    names = static_names()
    assert {"index.html", "app.js", "style.css"} <= set(names)
    for name in names:
        assert any(fnmatch.fnmatch(f"static/{name}", p) for p in patterns), name


def test_every_module_an_import_names_is_there() -> None:
    names = set(static_names())
    for name in names:
        if name.endswith(".js"):
            source = STATIC.joinpath(name).read_text()
            for imported in re.findall(r'from "\./([^"]+)"', source):
                assert imported in names, f"{name} imports a missing {imported}"


def test_no_page_code_parses_a_string_as_markup_or_code() -> None:
    for name in static_names():
        source = STATIC.joinpath(name).read_text()
        found = SINKS.search(code_of(source))
        assert found is None, f"{name}: {found}"
        if name.endswith(".html"):
            # No inline script or style: the Content-Security-Policy would block them.
            assert "<script>" not in source, name
            assert "style=" not in source, name
            assert re.findall(r"<script[^>]*>", source) == [
                '<script type="module" src="/static/app.js">'
            ]


def test_the_other_commands_never_load_the_web_server() -> None:
    script = (
        "import sys, sloopctl.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'selenium')"
        " or m in ('sloopctl.web.server', 'sloopctl.web.feeds')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    assert done.stdout.strip() == "[]"
