"""Runs in flight: the run driver, one stage's execution, a run's records and its stops.

Owns the run driver (``runner``), a run's stored facts and settling (``records``),
crash recovery (``recovery``), executing one stage (``execute``: every child through
one path, commit in to commit out; ``placing``: where a child runs, decided once;
``spawning``: its prompt, credential and lines; ``outcomes``: its end as a
``StageResult``), why a run stops and what its driver does next (``stop``; the stops
come from ``budget``, ``watchdog``, ``retries``, ``disk_full``) and the state of a
run in flight (``runstate``).  The machinery it drives lives in lower layers:
processes, launchers and the ``Launcher`` seam in ``sloopd.proc``, the workspace
and git in ``sloopd.git``, the worker socket and its verbs in ``sloopd.worker``,
the merge queue and a run's way through it in ``sloopd.landing``.  It never imports
the Ray side (``sloopd.remote``): a child on Ray is a launcher and a workspace
picked by its placement, handed in by the composition root.

May import: ``wire``, ``store``, ``util``, ``vendor``, ``flows``, ``core``, ``queue``,
``landing``, ``views``, ``proc``, ``git`` and ``worker``.
"""
