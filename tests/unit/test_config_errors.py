"""One configuration error base: every section refuses with a subclass, named once.

The loader (sloopd.core.config) catches the base alone; a section whose error type
stopped deriving from it would escape the loader as a crash instead of a refusal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sloopd.core import config
from sloopd.core.executor_config import ExecutorConfigError
from sloopd.flows.agent_settings import FlowError
from sloopd.flows.placement import PlacementError
from sloopd.ops.webhook_targets import NotifyConfigError
from sloopd.util import validate
from sloopd.vendor import VendorConfigError
from sloopd.vendor.pricing import PricingError


@pytest.mark.parametrize(
    "error",
    [
        FlowError,
        PlacementError,
        ExecutorConfigError,
        NotifyConfigError,
        PricingError,
        VendorConfigError,
    ],
)
def test_every_section_refuses_with_the_one_base(error: type[Exception]) -> None:
    assert issubclass(error, validate.ConfigError)


def test_the_loader_raises_the_base_itself() -> None:
    assert config.ConfigError is validate.ConfigError


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"agent": {"stall_after": 5}},
            "'agent.stall_after' must be a duration string like \"20m\"",
        ),
        ({"repo": {"git_timeout": 5}}, "'repo.git_timeout': must be a duration string like \"2m\""),
        (
            {"notify": [{"url": "http://h", "on": ["merged"], "timeout": "2m"}]},
            "'notify[0].timeout' must be from 100ms to 1m",
        ),
        (
            {"pricing": {"m": {"input": -1}}},
            "'pricing.\"m\".input' must be a number of dollars, at least 0",
        ),
        ({"executor": {"backend": "x"}}, "'executor.backend' must be one of local | ray"),
    ],
)
def test_the_file_is_named_once_before_any_section_refusal(
    document: dict[str, object], message: str
) -> None:
    with pytest.raises(config.ConfigError) as refused:
        config.parse(document, Path("/repo/sloop.toml"), environ={})
    assert str(refused.value) == f"/repo/sloop.toml: {message}"
    assert type(refused.value) is config.ConfigError


def test_bounds_are_worded_in_the_operators_units() -> None:
    with pytest.raises(FlowError, match=r"^'agent\.x' must be at least 1s$"):
        validate.bounded(999, "agent.x", "at least 1s", least=1000, error=FlowError)
    assert validate.bounded(1000, "agent.x", "at least 1s", least=1000) == 1000
