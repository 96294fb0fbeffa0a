"""Hostile input that reaches no handler (issue 13): ids of refused lines, RE2, limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from sloopd.queue import actions, refs
from sloopd.util.regex import PatternError, compile_pattern
from sloopd.wire import api, salvage
from sloopd.wire.api import ErrorCode, ProtocolError
from sloopd.wire.dispatch import OperatorDispatcher
from tests.support.scaling import FACTOR, growth

ENVELOPE = b'"v":1,"verb":"show","args":{}'

# --- the id of a line orjson refuses ---------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'\xef\xbb\xbf{"id":"bom",' + ENVELOPE + b"}", "bom"),
        (b'{"id":"s","x":"\\ud800",' + ENVELOPE + b"}", "s"),
        (b'{"id":"u","x":"\xff",' + ENVELOPE + b"}", "u"),
        (b'{"id":"inf","x":1e400,' + ENVELOPE + b"}", "inf"),
        (b'{"id":"big","x":' + b"9" * 5000 + b"," + ENVELOPE + b"}", "big"),
        (b'{"x":' + b"[" * 5000 + b"]" * 5000 + b',"id":"deep",' + ENVELOPE + b"}", "deep"),
        (b'{"x":' + b'{"a":' * 3000 + b"1" + b"}" * 3000 + b',"id":7}', 7),
        (b'{"id":18446744073709551615,"x":1e400}', 2**64 - 1),
        (b'{"id":-9223372036854775808,"x":1e400}', -(2**63)),
        (b'{"i\\u0064":"escaped","x":1e400}', "escaped"),
        (b'{"id":"first","id":"last","x":1e400}', "last"),
        (b'{ "id" : "spaced" , "x" : [ 1e400 ] }\r', "spaced"),
    ],
)
def test_a_refused_line_that_is_still_an_object_has_its_id_read(
    line: bytes, expected: api.RequestId
) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(line)
    assert salvage.recover_id(line) == expected
    assert type(salvage.recover_id(line)) is type(expected)


@pytest.mark.parametrize(
    "line",
    [
        b'{"id":"\\ud800","x":1}',  # a lone surrogate cannot be written back
        b'{"id":"\xff"}',  # nor can invalid UTF-8
        b'{"id":18446744073709551616,"x":1e400}',  # past 64 bits
        b'{"id":-9223372036854775809,"x":1e400}',
        b'{"id":1e400}',
        b'{"id":1.5,"x":1e400}',
        b'{"id":true,"x":1e400}',
        b'{"id":["a"],"x":1e400}',
        b'{"id":"nan","x":NaN}',  # not JSON at all
        b'{"id":"trailing comma","x":1e400,}',
        b'{"id":"garbage","x":1e400} x',
        b'{"id":"two objects","x":1e400}{}',
        b'{"id":"unclosed","x":1e400',
        b'[{"id":"not an object","x":1e400}]',
        b'{"id":"control","x":"\x01"}',
        b'{"id":"unclosed deep","x":' + b"[" * 5000 + b"]" * 4999 + b"}",
        b"{" + b'"a":{' * 20_000 + b"}" * 20_000 + b',"id":"past the token budget"}',
    ],
)
def test_an_unreadable_id_or_a_line_that_is_not_an_object_gives_none(line: bytes) -> None:
    assert salvage.recover_id(line) is None


def _deep_line(depth: int) -> bytes:
    return b'{"id":"x","a":' + b"[" * depth + b"]" * depth + b"}"


def test_the_lenient_reread_stays_cheap_on_a_deep_line_of_a_mebibyte() -> None:
    """Cheap as a property (tests/support/scaling.py), not a wall-clock bound a busy
    host fails: four times the nesting costs at most about four times as much."""
    depth = api.MAX_REQUEST_BYTES // 2 - 20
    assert salvage.recover_id(_deep_line(depth)) == "x"
    grew = growth(_deep_line, salvage.recover_id, depth // FACTOR)
    assert grew.linear, grew


def test_dispatch_echoes_the_recovered_id_with_invalid_request() -> None:
    dispatcher = OperatorDispatcher({"show": lambda args: {}})
    reply = dispatcher.handle_line(b'{"v":1,"id":"r","verb":"show","args":{"ref":"\\udc00"}}')
    assert isinstance(reply, bytes)
    envelope = orjson.loads(reply)
    assert envelope["id"] == "r"
    assert envelope["error"]["code"] == "invalid_request"
    assert envelope["error"]["message"].startswith("malformed JSON")


# --- the pattern rung on RE2 -----------------------------------------------------------


def test_a_catastrophic_pattern_against_many_long_names_returns_quickly() -> None:
    """A backtracking engine takes exponential time in the name's length on this
    pattern (it would not return at 250 characters); RE2's grows linearly."""
    expression = refs.pattern("(a+)+$")

    def names(length: int) -> list[str]:
        return ["a" * length + "!"] * 1000

    def any_match(candidates: list[str]) -> bool:
        return any(refs.matches(expression, "T1", name) for name in candidates)

    assert not any_match(names(250))
    grew = growth(names, any_match, 250)
    assert grew.linear, grew


@pytest.mark.parametrize(
    "ref",
    [
        "a{4294967296}",
        "a{1001}",
        "a{1,99999999999}",
        "(?au)x",
        "(?<=a)b",
        "(?=a)",
        "(a)\\1",
        "[",
        "x**",
        "\\",
    ],
)
def test_what_re2_refuses_is_invalid_arguments_naming_the_problem(ref: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        refs.pattern(ref, field="scope")
    err = raised.value
    assert err.code == ErrorCode.INVALID_ARGUMENTS
    assert err.details == {"field": "scope", "scope": ref}
    assert "is not a valid regular expression: " in err.message
    assert err.message.rsplit(": ", 1)[-1]


@pytest.mark.parametrize(
    ("ref", "name", "found"),
    [
        ("LOGIN", "fix-login", True),  # a substring, case-insensitive
        ("fix.log", "fix-login", True),  # '.' makes a regex
        ("fix.log", "fixxlogin", True),
        ("^fix-", "a-fix-login", False),
        ("STRASSE|ÄB", "äb", True),  # Unicode case folding
        ("[{]9999[}]", "{9999}", True),  # braces in a class are literal
        ("\\{9999}", "{9999}", True),
        ("(" * 400 + "x" + ")" * 400, "x", True),
        ("a\x00b", "a\x00b", True),
    ],
)
def test_the_pattern_rung_matches_like_before(ref: str, name: str, found: bool) -> None:
    assert refs.matches(refs.pattern(ref), "T1", name) is found


def test_a_literal_pattern_takes_metacharacters_as_text() -> None:
    assert compile_pattern("a{99999}(", literal=True).search("xA{99999}(")
    with pytest.raises(PatternError):
        compile_pattern("a{99999}(")


# --- limits checked at argument parsing ------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "name"),
    [("show", "ref"), ("list", "ref"), ("run", "ref"), ("abort", "run"), ("events", "scope")],
)
def test_a_ref_over_the_limit_is_invalid_arguments_naming_it(verb: str, name: str) -> None:
    shape = api.VERBS[verb]
    assert shape.parse({name: "x" * api.MAX_REF_CHARS})[name]
    with pytest.raises(ProtocolError) as raised:
        shape.parse({name: "x" * (api.MAX_REF_CHARS + 1)})
    assert raised.value.code == ErrorCode.INVALID_ARGUMENTS
    assert raised.value.details == {"field": name, "limit_chars": api.MAX_REF_CHARS}


@pytest.mark.parametrize(
    ("given", "rule", "details"),
    [
        ("tickets/a\x00b.md", "NUL", {"field": "path"}),
        ("tickets/" + "a" * 256 + ".md", "NAME_MAX", {"field": "path", "limit_bytes": 255}),
        ("tickets/" + "é" * 127 + ".md", "NAME_MAX", {"field": "path", "limit_bytes": 255}),
        ("a/" * 2100 + "t.md", "PATH_MAX", {"field": "path", "limit_bytes": 4095}),
    ],
)
def test_a_post_path_no_file_can_have_is_invalid_arguments(
    given: str, rule: str, details: dict[str, Any]
) -> None:
    with pytest.raises(ProtocolError) as raised:
        actions.check_path(Path("/repo"), given)
    assert raised.value.code == ErrorCode.INVALID_ARGUMENTS
    assert rule in raised.value.message
    assert raised.value.details == details


def test_a_post_path_within_the_limits_passes() -> None:
    actions.check_path(Path("/repo"), "tickets/" + "a" * 252 + ".md")
