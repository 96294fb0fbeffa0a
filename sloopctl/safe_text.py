"""Text from agents and tickets, made safe to print on an operator's terminal.

Log records, ticket names and bodies, reasons, notes and event data are written
by agents and ticket authors, and a terminal obeys whatever control sequences
they hold: a new window title, a cleared screen, a clipboard write (OSC 52), a
line overwritten with ``\\r``, text reordered by a bidi override.  So every
string of a reply is cleaned once, when the client decodes it, before any
renderer sees it; ``--raw`` turns that off and ``--json`` prints the bytes as
received (JSON escapes every control character anyway).

The rule, kept short so it can be documented (docs/cli.md, docs/security.md):

* a whole escape sequence (CSI, OSC, DCS, SOS, PM, APC, in their 7-bit
  ``ESC x`` and 8-bit C1 forms, and the two- and three-byte ``ESC`` escapes)
  is removed without a trace: colour and cursor codes are the common case and
  carry nothing a reader needs;
* every other control character (C0 but ``\\n`` and ``\\t``, DEL, C1) and every
  bidi override or isolate (U+202A-U+202E, U+2066-U+2069) becomes U+FFFD
  (``�``), so what was there stays visible; an unterminated sequence leaves its
  introducer as ``�`` and the rest as plain text;
* a ``\\r`` that ends a line (CRLF output) is dropped; one inside a line is
  shown as ``�``.

The patterns are linear: a string sequence's body stops at the next ESC or C1
control, so no input makes the scan quadratic.
"""

from __future__ import annotations

import re
from typing import Any, Final

REPLACEMENT: Final = "\ufffd"

_SEQUENCE: Final = re.compile(
    r"""
      (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]    # CSI: ESC [ params final
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])                 # OSC, DCS, SOS, PM, APC ...
      [^\x07\x1b\x80-\x9f]* (?:\x07|\x1b\\|\x9c)              # ... up to BEL or ST
    | \x1b (?![\[\]PX^_]) [\x20-\x2f]* [\x30-\x7e]            # ESC c, ESC 7, ESC ( B, ...
    """,
    re.VERBOSE,
)
_LINE_END_CR: Final = re.compile(r"\r+(?=\n|\Z)")
_CONTROLS: Final = (
    range(0x00, 0x20),
    range(0x7F, 0xA0),
    range(0x202A, 0x202F),
    range(0x2066, 0x206A),
)
_REPLACE: Final = {
    code: REPLACEMENT for span in _CONTROLS for code in span if code not in (0x09, 0x0A)
}
_UNSAFE: Final = re.compile("[" + re.escape("".join(map(chr, _REPLACE))) + "]")


def clean(text: str) -> str:
    """``text`` without terminal control sequences; lone controls shown as U+FFFD."""
    if _UNSAFE.search(text) is None:  # the common case: nothing to do
        return text
    text = _SEQUENCE.sub("", text)
    text = _LINE_END_CR.sub("", text)
    return text.translate(_REPLACE)


def clean_tree(value: Any) -> Any:
    """A decoded JSON value with every string in it cleaned, object keys included."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(k) if isinstance(k, str) else k: clean_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_tree(v) for v in value]
    return value
