"""The read side: what ``show``, ``logs`` and ``events`` answer.

Owns the dashboard and the detail of tickets, runs and projects (``show``,
``runview``), the keyset-paged feeds (``feeds``, with ``logpages``,
``eventpages`` and ``runfacts``, long-poll included), a run's branch diff
(``diff``, which runs git read-only through ``sloopd.git``) and what a stage sent
back is told (``feedback``: for its prompt and ``brief``).

May import: ``wire``, ``store``, ``util``, ``flows``, ``core``, ``queue`` (for
references) and ``git``; it never imports ``runs``: no run's process or write to
git is reachable from a read (``diff`` only reads commits the run pinned).
"""
