"""The wire schema without a daemon: envelope checks and every verb's argument shape."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sloopd.wire import api
from sloopd.wire.api import ErrorCode, ProtocolError

# The protocol text's verbs and error codes, spelled out here rather than read back.
PROTOCOL_VERBS = {
    "show",
    "post",
    "run",
    "hold",
    "ready",
    "abort",
    "logs",
    "events",
    "brief",
    "note",
    "verdict",
    "status",
    "list",
    "wait",
}
# Additive operator verbs beyond the protocol text (docs/protocol.md).
ADDITIVE_VERBS = {"gc", "pause", "resume", "diff", "runs", "resolve"}
ALL_VERBS = PROTOCOL_VERBS | ADDITIVE_VERBS
WORKER_ONLY_VERBS = {"brief", "note", "verdict"}
PROTOCOL_ERROR_CODES = {
    "invalid_arguments",
    "invalid_request",
    "unsupported_version",
    "unknown_verb",
    "daemon_unavailable",
    "unauthorized",
    "not_found",
    "conflict",
    "cooldown_active",
    "internal",
}

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def envelope(**overrides: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"v": 1, "id": "r1", "verb": "show", "args": {}, "token": None}
    message.update(overrides)
    return message


def reject(message: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        api.parse_envelope(message)
    return caught.value


def reject_args(verb: str, args: dict[str, Any]) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        api.VERBS[verb].parse(args)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    return caught.value


# --- the vocabulary -----------------------------------------------------------


def test_the_ten_error_codes_are_exactly_the_protocols() -> None:
    assert {str(code) for code in ErrorCode} == PROTOCOL_ERROR_CODES


def test_every_protocol_verb_has_a_shape_and_no_undeclared_verb_exists() -> None:
    assert set(api.VERBS) == ALL_VERBS
    for name, verb in api.VERBS.items():
        assert verb.name == name


def test_socket_roles_of_the_verbs() -> None:
    for name, verb in api.VERBS.items():
        assert verb.operator is (name not in WORKER_ONLY_VERBS), name
    assert {n for n, v in api.VERBS.items() if v.worker} == {"brief", "show", "note", "verdict"}
    assert {n for n, v in api.VERBS.items() if v.deprecated} == {"status", "list", "wait"}


def test_protocol_error_serialises_to_code_message_details() -> None:
    err = ProtocolError(ErrorCode.NOT_FOUND, "no such ticket", {"ref": "T9"})
    assert api.error("x", err) == {
        "id": "x",
        "ok": False,
        "error": {"code": "not_found", "message": "no such ticket", "details": {"ref": "T9"}},
    }
    assert ProtocolError(ErrorCode.INTERNAL, "boom").as_error()["details"] == {}
    assert api.ok(7, {"a": 1}) == {"id": 7, "ok": True, "data": {"a": 1}}


def test_request_builds_a_v1_envelope_that_parses_back() -> None:
    message = api.request("show", {"limit": 3}, request_id=5)
    assert message == {"v": 1, "id": 5, "verb": "show", "args": {"limit": 3}, "token": None}
    parsed = api.parse_envelope(message)
    assert (parsed.id, parsed.verb.name, parsed.args, parsed.token) == (
        5,
        "show",
        {"limit": 3},
        None,
    )


# --- the envelope ---------------------------------------------------------------


def test_a_well_formed_envelope_parses() -> None:
    parsed = api.parse_envelope(envelope(verb="hold", args={"ref": "T1"}, token="tok"))
    assert parsed.id == "r1"
    assert parsed.verb is api.VERBS["hold"]
    assert parsed.args == {"ref": "T1"}
    assert parsed.token == "tok"


def test_token_may_be_omitted_and_unknown_envelope_fields_are_ignored() -> None:
    message = envelope(extra={"future": True}, trace="abc")
    del message["token"]
    parsed = api.parse_envelope(message)
    assert parsed.token is None
    assert parsed.verb.name == "show"


@pytest.mark.parametrize("value", [[], [1], 1, "show", None, 1.5, True])
def test_a_non_object_is_invalid_request(value: Any) -> None:
    assert reject(value).code is ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("version", [True, False, "1", 1.5, 1.0, None, [1], {"v": 1}])
def test_a_missing_or_non_integer_version_is_invalid_request(version: Any) -> None:
    err = reject(envelope(v=version))
    assert err.code is ErrorCode.INVALID_REQUEST
    assert err.details == {"field": "v"}
    missing = envelope()
    del missing["v"]
    assert reject(missing).details == {"field": "v"}


@given(st.integers().filter(lambda n: n != 1))
def test_any_other_integer_version_is_unsupported_and_lists_1(version: int) -> None:
    # Checked first: nothing else about the envelope matters to a foreign version.
    err = reject({"v": version, "verb": 17})
    assert err.code is ErrorCode.UNSUPPORTED_VERSION
    assert err.details == {"supported": [1]}


@pytest.mark.parametrize("request_id", [None, True, False, 1.5, [], {}, ["a"]])
def test_an_id_that_is_not_a_string_or_integer_is_invalid_request(request_id: Any) -> None:
    err = reject(envelope(id=request_id))
    assert err.code is ErrorCode.INVALID_REQUEST
    assert err.details == {"field": "id"}


def test_a_missing_id_is_invalid_request() -> None:
    message = envelope()
    del message["id"]
    assert reject(message).details == {"field": "id"}


@pytest.mark.parametrize("request_id", ["", "req-1", 0, -3, 2**53])
def test_string_and_integer_ids_are_accepted(request_id: str | int) -> None:
    assert api.parse_envelope(envelope(id=request_id)).id == request_id


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"id": "a"}, "a"),
        ({"id": 4}, 4),
        ({"id": True}, None),
        ({"id": None}, None),
        ({"id": 2.0}, None),
        ({"id": {"x": 1}}, None),
        ({}, None),
        (["id"], None),
        ("id", None),
    ],
)
def test_readable_id(message: Any, expected: api.RequestId) -> None:
    assert api.readable_id(message) == expected


@pytest.mark.parametrize("verb", [None, 1, True, ["show"], {"name": "show"}])
def test_a_missing_or_non_string_verb_is_invalid_request(verb: Any) -> None:
    err = reject(envelope(verb=verb))
    assert err.code is ErrorCode.INVALID_REQUEST
    assert err.details == {"field": "verb"}
    message = envelope()
    del message["verb"]
    assert reject(message).details == {"field": "verb"}


@pytest.mark.parametrize("verb", ["", "SHOW", "shows", "activate", "x" * 300])
def test_an_unknown_verb_is_unknown_verb(verb: str) -> None:
    err = reject(envelope(verb=verb))
    assert err.code is ErrorCode.UNKNOWN_VERB
    assert sorted(err.details["verbs"]) == sorted(ALL_VERBS)


@pytest.mark.parametrize("args", [None, [], "x", 1, True])
def test_args_must_be_an_object(args: Any) -> None:
    err = reject(envelope(args=args))
    assert err.code is ErrorCode.INVALID_REQUEST
    assert err.details == {"field": "args"}
    message = envelope()
    del message["args"]
    assert reject(message).details == {"field": "args"}


@pytest.mark.parametrize("token", [1, True, [], {}])
def test_a_token_must_be_a_string_or_null(token: Any) -> None:
    err = reject(envelope(token=token))
    assert err.code is ErrorCode.INVALID_REQUEST
    assert err.details == {"field": "token"}


@given(JSON_VALUES)
def test_parse_envelope_only_ever_raises_envelope_errors(value: Any) -> None:
    try:
        api.parse_envelope(value)
    except ProtocolError as err:
        refused = err
    else:
        return
    assert refused.code in {
        ErrorCode.INVALID_REQUEST,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNKNOWN_VERB,
    }
    assert refused.message


@given(
    st.dictionaries(
        st.text().filter(lambda k: k not in {"v", "id", "verb", "args", "token"}),
        JSON_VALUES,
        max_size=5,
    )
)
def test_any_unknown_envelope_fields_are_ignored(extra: dict[str, Any]) -> None:
    parsed = api.parse_envelope({**envelope(verb="status"), **extra})
    assert parsed.verb.name == "status"
    assert parsed.args == {}


# --- argument shapes --------------------------------------------------------------

# A valid argument set per verb, with every field the verb knows.
FULL_ARGS: dict[str, dict[str, Any]] = {
    "show": {"ref": "T1", "limit": 5, "since": 0, "wait_ms": 60000},
    "post": {
        "path": "tickets/a.md",
        "hold": True,
        "manual": False,
        "trigger": {"at_ms": 5},
        "sha256": "0" * 64,  # 0.9.0
    },
    "run": {"ref": "a", "trigger": {"at_ms": 0}},
    "hold": {"ref": "T1"},
    "ready": {"ref": "T1"},
    "abort": {"run": "R1", "reason": "wrong ticket"},  # reason: 0.8.0
    "logs": {"run": "R1", "stage": "test#2", "tail": 10, "after": "c1", "wait_ms": 30000},
    "events": {"after": "c1", "tail": 1, "scope": "project:x", "wait_ms": 0},
    "brief": {},
    "note": {"text": "hello"},
    "verdict": {"verdict": "fail", "reason": "broken", "confidence": "high"},
    "status": {},
    "list": {"ref": "a", "limit": 1},
    "wait": {"run": "R1", "timeout_ms": 0},
    "gc": {},
    "pause": {"reason": "maintenance"},
    "resume": {},
    "diff": {"run": "R1", "max_bytes": 1024},
    "runs": {"state": "needs_review", "limit": 25, "offset": 50},
    "resolve": {"run": "R3", "resolution": "dismissed", "reason": "done in #412", "by": "alice"},
}
REQUIRED: dict[str, set[str]] = {
    "show": set(),
    "post": {"path"},
    "run": {"ref"},
    "hold": {"ref"},
    "ready": {"ref"},
    "abort": {"run"},
    "logs": {"run"},
    "events": set(),
    "brief": set(),
    "note": {"text"},
    "verdict": {"verdict"},
    "status": set(),
    "list": set(),
    "wait": {"run"},
    "gc": set(),
    "pause": set(),
    "resume": set(),
    "diff": {"run"},
    "runs": set(),
    "resolve": {"run", "resolution"},
}


def test_the_argument_tables_cover_every_verb() -> None:
    assert set(FULL_ARGS) == set(REQUIRED) == ALL_VERBS
    for name, verb in api.VERBS.items():
        assert set(verb.fields) == set(FULL_ARGS[name]), name
        assert {f for f, spec in verb.fields.items() if spec.required} == REQUIRED[name], name


@pytest.mark.parametrize("verb", sorted(ALL_VERBS))
def test_a_full_valid_argument_set_parses_unchanged(verb: str) -> None:
    assert api.VERBS[verb].parse(FULL_ARGS[verb]) == FULL_ARGS[verb]


@pytest.mark.parametrize("verb", sorted(ALL_VERBS))
def test_the_required_fields_alone_suffice(verb: str) -> None:
    minimal = {name: FULL_ARGS[verb][name] for name in REQUIRED[verb]}
    assert api.VERBS[verb].parse(minimal) == minimal


@pytest.mark.parametrize(
    ("verb", "field"), [(v, f) for v in sorted(REQUIRED) for f in sorted(REQUIRED[v])]
)
def test_a_missing_or_null_required_field_is_named(verb: str, field: str) -> None:
    without = {k: v for k, v in FULL_ARGS[verb].items() if k != field}
    assert reject_args(verb, without).details == {"field": field}
    assert reject_args(verb, {**without, field: None}).details == {"field": field}


@pytest.mark.parametrize("verb", sorted(ALL_VERBS))
def test_explicit_null_means_absent_for_optional_fields(verb: str) -> None:
    required = {name: FULL_ARGS[verb][name] for name in REQUIRED[verb]}
    optional_nulls = {name: None for name in FULL_ARGS[verb] if name not in REQUIRED[verb]}
    assert api.VERBS[verb].parse({**required, **optional_nulls}) == required


@given(
    verb=st.sampled_from(sorted(ALL_VERBS)),
    extra=st.dictionaries(st.text(max_size=20), JSON_VALUES, min_size=1, max_size=4),
)
def test_any_unknown_argument_field_is_rejected_and_named(verb: str, extra: dict[str, Any]) -> None:
    unknown = {k: v for k, v in extra.items() if k not in api.VERBS[verb].fields}
    if not unknown:
        return
    err = reject_args(verb, {**FULL_ARGS[verb], **unknown})
    assert err.details["field"] == min(unknown)
    assert err.details["allowed"] == sorted(FULL_ARGS[verb])


@pytest.mark.parametrize("verb", ["post", "run"])
def test_the_retired_activation_argument_is_rejected(verb: str) -> None:
    args = {name: FULL_ARGS[verb][name] for name in REQUIRED[verb]}
    err = reject_args(verb, {**args, "activation": {"at_ms": 1}})
    assert err.details["field"] == "activation"


@pytest.mark.parametrize(
    ("verb", "field"),
    [("show", "limit"), ("list", "limit"), ("logs", "tail"), ("events", "tail")],
)
@pytest.mark.parametrize("value", [True, False, 0, -1, "3", 1.5, 2.0, [1], {"n": 1}])
def test_counts_must_be_integers_of_at_least_one(verb: str, field: str, value: Any) -> None:
    required = {name: FULL_ARGS[verb][name] for name in REQUIRED[verb]}
    assert reject_args(verb, {**required, field: value}).details["field"] == field


@pytest.mark.parametrize("value", [1, 2, 10**9])
def test_limit_accepts_any_positive_integer(value: int) -> None:
    assert api.VERBS["show"].parse({"limit": value}) == {"limit": value}


@pytest.mark.parametrize(
    ("verb", "field"),
    [
        ("show", "ref"),
        ("post", "path"),
        ("run", "ref"),
        ("hold", "ref"),
        ("ready", "ref"),
        ("abort", "run"),
        ("abort", "reason"),
        ("logs", "run"),
        ("logs", "stage"),
        ("events", "scope"),
        ("note", "text"),
        ("list", "ref"),
        ("wait", "run"),
    ],
)
@pytest.mark.parametrize("value", ["", "   ", 5, True, ["T1"], {"id": "T1"}])
def test_reference_like_strings_must_be_non_empty_strings(
    verb: str, field: str, value: Any
) -> None:
    args = {**FULL_ARGS[verb], field: value}
    assert reject_args(verb, args).details["field"] == field


@pytest.mark.parametrize(
    "value", ["", "0" * 63, "0" * 65, "A" * 64, "g" * 64, " " + "0" * 63, 5, ["0" * 64]]
)
def test_a_posts_digest_is_64_lowercase_hex_digits(value: Any) -> None:
    args = {"path": "tickets/a.md", "sha256": value}
    assert reject_args("post", args).details["field"] == "sha256"


@pytest.mark.parametrize("verb", ["logs", "events"])
@pytest.mark.parametrize("value", [0, 1, 30_000, api.MAX_WAIT_MS])
def test_wait_ms_takes_an_integer_from_zero_to_the_limit(verb: str, value: int) -> None:
    required = {name: FULL_ARGS[verb][name] for name in REQUIRED[verb]}
    assert api.VERBS[verb].parse({**required, "wait_ms": value}) == {**required, "wait_ms": value}


@pytest.mark.parametrize("verb", ["logs", "events"])
@pytest.mark.parametrize(
    "value", [-1, api.MAX_WAIT_MS + 1, 2**53, True, False, 1.0, 0.5, "100", [], {}]
)
def test_wait_ms_outside_its_range_or_not_an_integer_is_refused(verb: str, value: Any) -> None:
    required = {name: FULL_ARGS[verb][name] for name in REQUIRED[verb]}
    assert reject_args(verb, {**required, "wait_ms": value}).details["field"] == "wait_ms"


@pytest.mark.parametrize(("verb", "field"), [("logs", "after"), ("events", "after")])
@pytest.mark.parametrize("value", [1, True, [], {}])
def test_cursors_must_be_strings(verb: str, field: str, value: Any) -> None:
    assert reject_args(verb, {**FULL_ARGS[verb], field: value}).details["field"] == field


@pytest.mark.parametrize("field", ["hold", "manual"])
@pytest.mark.parametrize("value", [1, 0, "true", [], {}])
def test_post_flags_must_be_booleans(field: str, value: Any) -> None:
    assert reject_args("post", {"path": "a.md", field: value}).details["field"] == field


@pytest.mark.parametrize("verb", ["post", "run"])
@pytest.mark.parametrize(
    ("trigger", "parsed"),
    [({}, {}), ({"at_ms": None}, {}), ({"at_ms": 0}, {"at_ms": 0}), ({"at_ms": 9}, {"at_ms": 9})],
)
def test_trigger_shapes(verb: str, trigger: dict[str, Any], parsed: dict[str, Any]) -> None:
    base = {name: FULL_ARGS[verb][name] for name in REQUIRED[verb]}
    assert api.VERBS[verb].parse({**base, "trigger": trigger}) == {**base, "trigger": parsed}


@pytest.mark.parametrize("verb", ["post", "run"])
@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        (5, "trigger"),
        ("soon", "trigger"),
        ([], "trigger"),
        ({"at_ms": -1}, "trigger.at_ms"),
        ({"at_ms": True}, "trigger.at_ms"),
        ({"at_ms": "10m"}, "trigger.at_ms"),
        ({"at_ms": 1.5}, "trigger.at_ms"),
        ({"at_ms": 1, "activation": "A1"}, "trigger.activation"),
        ({"at": 1}, "trigger.at"),
    ],
)
def test_bad_triggers_name_the_field(verb: str, trigger: Any, field: str) -> None:
    base = {name: FULL_ARGS[verb][name] for name in REQUIRED[verb]}
    assert reject_args(verb, {**base, "trigger": trigger}).details["field"] == field


@pytest.mark.parametrize("verdict", ["pass", "fail"])
@pytest.mark.parametrize("confidence", ["low", "medium", "high"])
def test_verdict_accepts_its_vocabulary(verdict: str, confidence: str) -> None:
    args = {"verdict": verdict, "confidence": confidence}
    assert api.VERBS["verdict"].parse(args) == args


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"verdict": "PASS"}, "verdict"),
        ({"verdict": "ok"}, "verdict"),
        ({"verdict": True}, "verdict"),
        ({"verdict": "pass", "confidence": 0.9}, "confidence"),
        ({"verdict": "pass", "confidence": "very"}, "confidence"),
        ({"verdict": "pass", "confidence": "High"}, "confidence"),
        ({"verdict": "pass", "reason": 3}, "reason"),
        ({"verdict": "pass", "stage": "review"}, "stage"),
        ({"verdict": "pass", "attempt": 1}, "attempt"),
        ({"verdict": "pass", "reviewer": 0}, "reviewer"),
    ],
)
def test_verdict_rejections(args: dict[str, Any], field: str) -> None:
    assert reject_args("verdict", args).details["field"] == field


def test_one_of_lists_what_is_allowed() -> None:
    err = reject_args("verdict", {"verdict": "maybe"})
    assert err.details["allowed"] == ["pass", "fail"]


@pytest.mark.parametrize("value", [-1, True, "5", 0.5])
def test_wait_timeout_is_a_non_negative_integer(value: Any) -> None:
    assert reject_args("wait", {"run": "R1", "timeout_ms": value}).details["field"] == "timeout_ms"


@pytest.mark.parametrize("verb", ["brief", "status", "gc"])
def test_verbs_without_arguments_take_none(verb: str) -> None:
    assert api.VERBS[verb].parse({}) == {}
    assert reject_args(verb, {"ref": "T1"}).details["field"] == "ref"


# --- where the sockets live ------------------------------------------------------------


def test_repo_id_is_the_sha256_prefix_of_the_real_path(tmp_path: Path) -> None:
    real = tmp_path / "repo"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    expected = hashlib.sha256(os.path.realpath(real).encode()).hexdigest()[:12]
    assert api.repo_id(real) == expected
    assert api.repo_id(link) == expected
    assert len(expected) == 12


def test_default_socket_dir_precedence(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    rid = api.repo_id(repo)
    both = {"SLOOP_SOCKET_DIR": "/run/s", "XDG_RUNTIME_DIR": "/run/user/7"}
    assert api.default_socket_dir(repo, both) == Path("/run/s")
    xdg = {"XDG_RUNTIME_DIR": "/run/user/7", "SLOOP_SOCKET_DIR": ""}
    assert api.default_socket_dir(repo, xdg) == Path("/run/user/7/sloop") / rid
    fallback = Path(f"/tmp/sloop-{os.getuid()}") / rid
    assert api.default_socket_dir(repo, {}) == fallback
    assert api.default_socket_dir(repo, {"XDG_RUNTIME_DIR": ""}) == fallback
