"""Vendor diagnostics: why an agent failed, and when its vendor lets us back in.

Owns the pattern table (``patterns``), the substring prefilter that keeps
classifying cheap (``prefilter``), reading reset times (``reset``) and the
classifier itself (``classify``).  The run driver and the configuration call
into it.

May import: ``util`` (the configuration's error base, ``sloopd.util.validate``).
"""

from sloopd.vendor.classify import (
    LIMIT_CLASSES,
    UNKNOWN,
    Diagnosis,
    VendorConfigError,
    classify,
    patterns_from_config,
)
from sloopd.vendor.patterns import CLASSES, DEFAULT_PATTERNS, VENDORS, Pattern
from sloopd.vendor.reset import parse_reset

__all__ = [
    "CLASSES",
    "DEFAULT_PATTERNS",
    "LIMIT_CLASSES",
    "UNKNOWN",
    "VENDORS",
    "Diagnosis",
    "Pattern",
    "VendorConfigError",
    "classify",
    "parse_reset",
    "patterns_from_config",
]
