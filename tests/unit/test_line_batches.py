"""Output handed over a read at a time: the same lines, tail and limits as line by line.

The capture hands each read of a pipe to the runner as one batch; these prove the
batch paths equal the line-by-line rules they replace, on arbitrary input.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sloopd.proc.lines import MAX_LINE_BYTES, LineSplitter, OutputBudget
from sloopd.vendor.tail import LINE_CHARS, OutputTail

# Bytes that make newlines, long lines and broken UTF-8 likely.
_PIECES = st.sampled_from(
    [
        *(b"\n", b"a", b"ok line", b"\xc3\xa9", b"\xe2\x82", b"\xff", b"\n\n"),
        *(b"x" * 4000, b"z" * 30_000, "\u20ac".encode() * 7001),
    ]
)
_CHUNKS = st.lists(
    st.lists(_PIECES, max_size=40).map(b"".join).filter(bool), min_size=1, max_size=40
)


def _reference(stream: bytes) -> list[tuple[str, bool]]:
    """The rule, stated plainly: lines split at newlines, long ones cut into flagged
    pieces of at most MAX_LINE_BYTES (not inside a character), each decoded alone."""
    out: list[tuple[str, bool]] = []
    lines = stream.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    for line in lines:
        if len(line) <= MAX_LINE_BYTES:
            out.append((line.decode("utf-8", "replace"), False))
            continue
        while len(line) > MAX_LINE_BYTES:
            cut = MAX_LINE_BYTES
            while cut > MAX_LINE_BYTES - 3 and line[cut] & 0xC0 == 0x80:
                cut -= 1
            if line[cut] & 0xC0 == 0x80:
                cut = MAX_LINE_BYTES
            out.append((line[:cut].decode("utf-8", "replace"), True))
            line = line[cut:]
        out.append((line.decode("utf-8", "replace"), True))
    return out


@settings(max_examples=150, deadline=None)
@given(_CHUNKS, st.integers(min_value=0, max_value=20))
def test_batches_carry_the_lines_line_by_line_would(chunks: list[bytes], repeat: int) -> None:
    # Repeating a chunk of 4000-byte runs builds lines past MAX_LINE_BYTES.
    chunks = chunks + [chunks[-1]] * repeat
    got: list[tuple[str, bool]] = []
    calls = 0

    def on_lines(stream: str, texts: list[str], split: bool) -> None:
        nonlocal calls
        assert stream == "stdout"
        assert texts
        assert not split or len(texts) == 1  # a split piece leaves alone
        calls += 1
        got.extend((text, split) for text in texts)

    splitter = LineSplitter("stdout", on_lines)
    for chunk in chunks:
        splitter.feed(chunk)
    splitter.close()
    assert got == _reference(b"".join(chunks))
    assert calls <= len(got)


def test_one_read_of_short_lines_is_one_batch() -> None:
    batches: list[list[str]] = []
    splitter = LineSplitter("stdout", lambda _s, texts, _split: batches.append(texts))
    splitter.feed(b"one\ntwo\nthr")
    splitter.feed(b"ee\nfour\n")
    assert batches == [["one", "two"], ["three", "four"]]


_LINES = st.lists(
    st.one_of(
        st.text(max_size=30),
        st.integers(min_value=0, max_value=3 * LINE_CHARS).map(lambda n: "y" * n),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_LINES, max_size=12), st.integers(1, 40), st.integers(1, 80_000))
def test_tail_extend_equals_appending_each(
    batches: list[list[str]], max_lines: int, max_chars: int
) -> None:
    batched, each = OutputTail(max_lines, max_chars), OutputTail(max_lines, max_chars)
    for batch in batches:
        batched.extend(batch)
        for line in batch:
            each.append(line)
        assert list(batched) == list(each)
        assert batched.chars == each.chars


@settings(max_examples=150, deadline=None)
@given(st.lists(_LINES, max_size=12), st.integers(0, 50), st.integers(0, 100_000))
def test_budget_batch_verdicts_equal_line_by_line(
    batches: list[list[str]], max_lines: int, max_bytes: int
) -> None:
    batched, each = OutputBudget(max_lines, max_bytes), OutputBudget(max_lines, max_bytes)
    for batch in batches:
        verdicts = [each.admit(text) for text in batch]
        admitted = batched.admit_many(batch)
        # Once over a limit everything after is dropped: the stored lines are a prefix.
        assert verdicts == [True] * admitted + [False] * (len(batch) - admitted)
    for field in ("stored_lines", "stored_bytes", "dropped_lines", "dropped_bytes", "seen_bytes"):
        assert getattr(batched, field) == getattr(each, field)
    assert (batched.first_dropped_ms is None) == (each.first_dropped_ms is None)
