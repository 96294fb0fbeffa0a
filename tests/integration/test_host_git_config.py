"""No daemon git reads the daemon user's global or system git config (issue 34, item 3).

On 0.8.0 ``checkout.create``'s ``reset --hard`` ran on the host with the daemon's
environment: a committed ``.gitattributes`` naming a filter defined in the daemon
user's ``~/.gitconfig`` (``filter=lfs`` after ``git lfs install``) or in the system
config ran that filter on the host, for content an agent may have written.  Here the
daemon's HOME holds a global config, and the system config it is pointed at another,
each defining a smudge filter that leaves a marker; the repository's committed
``.gitattributes`` routes every file through them.  A run is made, works, syncs and
merges into main's checkout, and neither filter ever runs.
"""

from __future__ import annotations

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import git

FLOW = (
    "[[flows.default.stages]]\nname = 'implement'\naction = 'agent'\n\n"
    "[[flows.default.stages]]\nname = 'sync'\naction = 'sync'\n\n"
    "[[flows.default.stages]]\nname = 'merge'\naction = 'ff_only'\n"
)
# A filter that passes content through and leaves a marker: a run still works on a
# daemon that obeys it, and the marker says that it did.
FILTER = """[filter "{name}"]
\tsmudge = "touch {marker}; cat"
\tclean = "touch {marker}; cat"
"""


def test_checkouts_and_merges_run_no_filter_of_the_global_or_system_config(
    bench: Bench,
) -> None:
    home = bench.root / "daemon-home"
    home.mkdir()
    marks = bench.root / "marks"
    marks.mkdir()
    global_marker, system_marker = marks / "global-filter-ran", marks / "system-filter-ran"
    (home / ".gitconfig").write_text(FILTER.format(name="evil", marker=global_marker))
    system = bench.root / "gitconfig-system"
    system.write_text(FILTER.format(name="vile", marker=system_marker))
    bench.env.update({"HOME": str(home), "GIT_CONFIG_SYSTEM": str(system)})

    (bench.repo / ".gitattributes").write_text("* filter=evil\n*.md filter=vile\n")
    git(bench.repo, "add", ".gitattributes")
    agent = bench.argv("--write", "work.txt={run}", "--write", "notes.md=by {run}")
    bench.setup(sloop_toml(agent, extra=FLOW), {"filtered": ticket_text("Filtered")})
    bench.start()
    bench.post("filtered")
    run = bench.wait_run("filtered#1")

    assert run["state"] == "merged", run
    assert (bench.repo / "work.txt").read_text() == "R1\n"
    assert sorted(p.name for p in marks.iterdir()) == []
