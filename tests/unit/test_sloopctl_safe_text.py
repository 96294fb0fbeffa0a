"""The terminal-safety filter for agents' and tickets' text (sloopctl.safe_text).

A catalogue of hostile sequences, each with what must remain; then the rules
that hold for every input: nothing a terminal acts on survives, plain text is
untouched, and no input makes the scan slow.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sloopctl.render import render
from sloopctl.safe_text import REPLACEMENT, clean, clean_tree
from tests.support.scaling import growth

R = REPLACEMENT
# What a terminal could act on: ESC, the other C0 controls but \n and \t, DEL,
# C1, and the bidi overrides and isolates.
FORBIDDEN = frozenset(
    [chr(c) for c in range(0x20) if c not in (0x09, 0x0A)]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)

CATALOGUE = [
    # (name, hostile text, what is printed)
    ("window title, BEL", "a\x1b]0;pwned\x07b", "ab"),
    ("window title, ST", "a\x1b]2;pwned\x1b\\b", "ab"),
    ("OSC 52 clipboard write", "x\x1b]52;c;cm0gLXJmIH4K\x07y", "xy"),
    ("OSC 8 hyperlink", "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\", "click"),
    ("clear screen", "\x1b[2J\x1b[Hfake prompt", "fake prompt"),
    ("colour", "\x1b[1;31mred\x1b[0m", "red"),
    ("cursor up and erase line", "ok\x1b[1A\x1b[2Kforged", "okforged"),
    ("private mode (alternate screen)", "\x1b[?1049hhidden", "hidden"),
    ("8-bit CSI", "\x9b2Jtext", "text"),
    ("8-bit OSC to 8-bit ST", "\x9d0;title\x9ctext", "text"),
    ("DCS", "\x1bPq#0;2;0;0;0\x1b\\after", "after"),
    ("APC", "\x1b_payload\x1b\\after", "after"),
    ("PM", "\x1b^privacy\x1b\\after", "after"),
    ("SOS", "\x1bXstring\x1b\\after", "after"),
    ("full reset", "\x1bcafter", "after"),
    ("save cursor", "\x1b7a\x1b8b", "ab"),
    ("charset designation", "\x1b(0lqk\x1b(B", "lqk"),
    ("carriage return overwrite", "rm -rf /\rls -l   ", f"rm -rf /{R}ls -l   "),
    ("CRLF line ends", "one\r\ntwo\r", "one\ntwo"),
    ("backspace", "sudo\x08\x08\x08\x08echo", f"sudo{R * 4}echo"),
    ("bell", "ding\x07", f"ding{R}"),
    ("NUL", "a\x00b", f"a{R}b"),
    ("DEL", "a\x7fb", f"a{R}b"),
    ("lone C1 (NEL)", "a\x85b", f"a{R}b"),
    ("lone ESC at the end", "cut\x1b", f"cut{R}"),
    ("unterminated OSC stays visible", "a\x1b]0;title", f"a{R}]0;title"),
    ("unterminated 8-bit OSC", "\x9d0;title", f"{R}0;title"),
    ("malformed CSI", "\x1b[12\nnext", f"{R}[12\nnext"),
    ("right-to-left override", "file\u202excod.exe", f"file{R}xcod.exe"),
    ("every bidi override", "".join(map(chr, range(0x202A, 0x202F))), R * 5),
    ("every bidi isolate", "".join(map(chr, range(0x2066, 0x206A))), R * 4),
    ("vertical tab and form feed", "a\x0bb\x0cc", f"a{R}b{R}c"),
    ("tab and newline kept", "col\tcol\nline", "col\tcol\nline"),
    ("plain unicode kept", "naïve 日本語 ✓ \u200d", "naïve 日本語 ✓ \u200d"),
]


@pytest.mark.parametrize(
    ("hostile", "expected"), [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE]
)
def test_the_catalogue(hostile: str, expected: str) -> None:
    assert clean(hostile) == expected
    assert not FORBIDDEN & set(clean(hostile))


@given(st.text())
def test_nothing_a_terminal_acts_on_survives_any_input(text: str) -> None:
    assert not FORBIDDEN & set(clean(text))


@given(st.text(alphabet=st.characters(codec="utf-8").filter(lambda c: c not in FORBIDDEN)))
def test_text_without_controls_is_untouched(text: str) -> None:
    assert clean(text) == text


def test_clean_is_idempotent() -> None:
    for _name, hostile, _expected in CATALOGUE:
        assert clean(clean(hostile)) == clean(hostile)


@pytest.mark.parametrize(
    ("head", "unit"),
    [
        ("", "\x1b]"),
        ("", "\x9dA"),
        ("\x1b[", "11"),
        ("", "\x1b[1"),
        ("\x1bP", "xx"),
    ],
    ids=["osc-introducers", "c1-osc-introducers", "long-csi", "csi-introducers", "open-dcs"],
)
def test_no_input_makes_the_scan_slow(head: str, unit: str) -> None:
    """Linear as a property (tests/support/scaling.py), not a wall-clock bound a busy
    host fails: four times the hostile text costs about four times as much (a
    quadratic scan, sixteen)."""
    grew = growth(lambda n: head + unit * n, clean, 10_000)
    assert grew.linear, grew


def test_clean_tree_cleans_every_string_keys_included() -> None:
    value = {
        "name": "t\x1b]0;x\x07",
        "n": 3,
        "ok": True,
        "none": None,
        "rows": [{"reason": "a\rb"}, "\u202e"],
        "data": {"k\x1b[31m": "v"},
    }
    assert clean_tree(value) == {
        "name": "t",
        "n": 3,
        "ok": True,
        "none": None,
        "rows": [{"reason": f"a{R}b"}, R],
        "data": {"k": "v"},
    }


def test_a_cleaned_ticket_renders_without_controls() -> None:
    data = {
        "kind": "ticket",
        "value": {
            "id": "T1",
            "name": "evil\x1b]0;owned\x07",
            "title": "\x1b[2JTitle",
            "body": "line one\r\n\x1b]52;c;ZXZpbA==\x07line two\u202e",
            "state": "ready",
        },
    }
    out = render("show", clean_tree(data), 0, colour=False)
    assert not FORBIDDEN & set(out)
    assert "evil" in out
    assert "Title" in out
    assert "line two" in out
