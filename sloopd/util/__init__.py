"""Leaf helpers: the clock, durations and sizes, ``/proc``, RE2 (``regex``), tools with a
deadline (``subproc``), memory, the naming rule (``names``), and the configuration's
one error base with the checks every section's values go through (``validate``).

May import: nothing of ``sloopd``; the layers above it import it.
"""
