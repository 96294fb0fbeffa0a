"""Leaf helpers with no opinion about Sloop: the clock, duration text, ``/proc``, RE2.

Imports nothing else of ``sloopd``; every layer may import it.
"""
