"""Leaf helpers: the clock, durations and sizes, ``/proc``, RE2 (``regex``), tools with a
deadline (``subproc``), memory, and the naming rule (``names``).

Imports nothing else of ``sloopd``; every layer may import it.
"""
