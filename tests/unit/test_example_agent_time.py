"""The example agent takes the time a ticket asks for ("Take N seconds."), bounded, so
the README's tour has a run in flight to steer; any other text asks for none."""

from __future__ import annotations

import pytest

from sloopctl.init_template import EXAMPLE_TICKET_TEXT
from sloopd.examples.agent import MAX_TAKE_S, seconds_asked


@pytest.mark.parametrize(
    ("prompt", "seconds"),
    [
        ("# T\n\nTake 20 seconds.\n", 20),
        ("take 1 second\n", 1),
        ("# T\nTake 999 seconds.", MAX_TAKE_S),
        ("# T\nPlease take 20 seconds.\n", 0),  # a line of its own, not a sentence in one
        ("# T\nTake twenty seconds.\n", 0),
        ("# T\nTake -5 seconds.\n", 0),
        ("", 0),
    ],
)
def test_a_line_of_its_own_asks_for_seconds(prompt: str, seconds: int) -> None:
    assert seconds_asked(prompt) == seconds


def test_the_example_ticket_asks_for_twenty_seconds() -> None:
    assert seconds_asked(EXAMPLE_TICKET_TEXT) == 20
