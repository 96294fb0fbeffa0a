"""Runs in flight: the driver, stage execution, a run's records, branch and stops.

Owns the run driver (``runner``), a run's stored facts and settling (``records``),
crash recovery (``recovery``), executing one stage (``execute``, ``spawning``,
``stage_io``: the ``Launcher`` seam and its values, ``launch``: where a stage's
child runs on this host), a run's branch through its stages (``branch``), why a run
stops and what its driver does next (``stop``; the stops come from ``budget``,
``watchdog``, ``retries``), a stage's outcome (``results``), the state of a run in
flight (``runstate``) and the worker verbs (``worker_verbs``, which append to the
stage log).  The machinery it drives lives in lower layers: processes in
``sloopd.proc``, git in ``sloopd.git``, the worker socket in ``sloopd.worker``.
The top layer below the composition root: it may import every other layer.
"""
