"""Flows and their walk: the stage log replayed against a run's flow.

Owns flow validation (``flow``), the pure replay that decides a run's next
step (``walk``), reading and appending stage-log rows (``stagelog``), a stage's
outcome as its ``stage_finished`` row stores it (``results``), the reasons derived
from a replay (``explain``), what a classified failure's reason says and whether it
is transient (``diagnosed``), the agent settings and presets.  Both the read side
(``views``) and the run driver (``runs``) import it, so it never imports either.

May import: ``wire``, ``store``, ``util`` and ``vendor`` (the classifier's words).
"""
