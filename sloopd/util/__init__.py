"""Leaf helpers: the clock, duration text, ``/proc``, and the naming rule (``names``).

Imports nothing else of ``sloopd``; every layer may import it.
"""
