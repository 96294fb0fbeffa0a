"""Leaf helpers with no opinion about Sloop: the clock, duration text, and ``/proc``.

Imports nothing else of ``sloopd``; every layer may import it.
"""
