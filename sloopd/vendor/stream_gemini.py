"""Gemini CLI usage, read from its ``--output-format stream-json`` (or ``json``) output.

``gemini -o stream-json`` prints one JSON event a line (``init``, ``message``,
``tool_use``, ``tool_result``, ``error``, ``result``); the final ``result`` event carries
the session's ``stats``::

    {"type":"result","status":"success","stats":{"total_tokens":4040,"input_tokens":3600,
     "output_tokens":440,"cached":600,"input":3000,"duration_ms":230,"tool_calls":1,
     "models":{"gemini-2.5-pro":{"total_tokens":4040,"input_tokens":3600,
     "output_tokens":440,"cached":600,"input":3000}}}}

(also on failure, with zeros).  ``input_tokens`` is the prompt tokens, cached ones
included (``input`` is the uncached part), ``output_tokens`` the candidates' tokens,
``cached`` the tokens served from the context cache; ``Usage`` takes them as they are,
so ``Usage.tokens`` is Gemini's ``total_tokens`` less thoughts and tool tokens.  The
per-model figures are summed when present, the session totals used otherwise.

``gemini -o json`` prints one pretty-printed document at exit,
``{"response": ..., "stats": {"models": {"<model>": {"tokens": {"prompt", "candidates",
"cached", ...}}}}}``; a line holding that whole document (compacted) is read too.

Gemini reports no cost: ``cost_usd`` stays None, and the tokens of each model the
stats name go to ``Usage.models``, which ``sloopd.vendor.pricing`` prices.  Nothing
before the final event carries usage (the CLI drops its internal ``usage`` events from
stream-json), so a budget can only judge a Gemini stage once it has ended.  Like every
stream parser this never raises on a line it does not understand.
"""

from __future__ import annotations

import json
from typing import Any

from sloopd.vendor.usage import ModelTokens, Usage

_MAX_LINE = 1 << 20  # a stats line is a few hundred bytes; never parse a huge line


def _count(value: Any) -> int:
    """A token count as the CLI printed it; anything else (bool, float, str, <0) is 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def _stream_stats(stats: dict[str, Any]) -> Usage | None:
    """``result.stats`` of stream-json: per model when listed, else the session totals."""
    models = stats.get("models")
    rows: list[tuple[str, dict[str, Any]]]
    if isinstance(models, dict) and models and all(isinstance(m, dict) for m in models.values()):
        rows = [(str(name), row) for name, row in models.items()]
    else:
        rows = [("", stats)]
    usage = Usage()
    found = False
    for model, row in rows:
        if not any(key in row for key in ("input_tokens", "output_tokens", "cached")):
            continue
        found = True
        tokens = ModelTokens(
            _count(row.get("input_tokens")),
            _count(row.get("output_tokens")),
            _count(row.get("cached")),
        )
        _add(usage, model, tokens)
    return usage if found else None


def _add(usage: Usage, model: str, tokens: ModelTokens) -> None:
    usage.input_tokens += tokens.input_tokens
    usage.output_tokens += tokens.output_tokens
    usage.cached_tokens += tokens.cached_tokens
    if model:
        usage.models[model] = usage.models.get(model, ModelTokens()).plus(tokens)


def _json_stats(stats: dict[str, Any]) -> Usage | None:
    """``stats`` of ``-o json``: ``models.<m>.tokens.{prompt,candidates,cached}``."""
    models = stats.get("models")
    if not isinstance(models, dict):
        return None
    usage = Usage()
    found = False
    for name, model in models.items():
        tokens = model.get("tokens") if isinstance(model, dict) else None
        if not isinstance(tokens, dict):
            continue
        found = True
        counts = ModelTokens(
            _count(tokens.get("prompt")),
            _count(tokens.get("candidates")),
            _count(tokens.get("cached")),
        )
        _add(usage, str(name), counts)
    return usage if found else None


def parse(line: str, usage: Usage) -> bool:
    """Add the usage a Gemini CLI output line reports to ``usage``; True if it was stats."""
    text = line.strip()
    if not text.startswith("{") or len(text) > _MAX_LINE or '"stats"' not in text:
        return False
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if not isinstance(event, dict):
        return False
    stats = event.get("stats")
    if not isinstance(stats, dict):
        return False
    if event.get("type") == "result":
        found = _stream_stats(stats)
    elif "type" not in event:
        found = _json_stats(stats)
    else:
        return False
    if found is None:
        return False
    usage.add(found)
    return True
