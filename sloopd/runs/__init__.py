"""Runs in flight: the driver, stage execution, a run's records, branch and stops.

Owns the run driver (``runner``), a run's stored facts and settling (``records``),
crash recovery (``recovery``), executing one stage (``execute``, ``spawning``,
``launch``: where a stage's child runs on this host), a run's branch through its
stages (``branch``), why a run stops and what its driver does next (``stop``; the
stops come from ``budget``, ``watchdog``, ``retries``), the state of a run in flight
(``runstate``); its way through the merge queue is ``sloopd.landing``'s.  The
machinery it drives lives in lower layers: processes and the ``Launcher`` seam
(``sloopd.proc.stage_io``) in ``sloopd.proc``, git in ``sloopd.git``, the worker
socket and its verbs in ``sloopd.worker``, a stage's outcome (``sloopd.flows.results``) with the
stage log it is stored in.
The top layer below the composition root: it may import every other layer.
"""
