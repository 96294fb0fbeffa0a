"""``[executor]`` and a stage's placement: parsed strictly, resolved seat over stage."""

from __future__ import annotations

import pytest

from sloopd.core import config
from sloopd.flows.placement import Resources


def _parse(document: dict[str, object]) -> config.Config:
    return config.parse(document, environ={})


def test_the_default_is_local_with_nothing_asked() -> None:
    parsed = _parse({})
    assert parsed.executor.backend == "local"
    assert parsed.executor.address == "auto"


def test_executor_keys_and_resources_parse() -> None:
    parsed = _parse(
        {
            "executor": {
                "backend": "ray",
                "address": "127.0.0.1:6379",
                "resources": {"cpus": 2, "memory": "2GiB", "custom": {"agents": 1}},
            }
        }
    )
    assert parsed.executor.resources == Resources(2.0, 2 << 30, (("agents", 1.0),))


def test_max_bundle_is_512_mib_unless_set() -> None:
    assert _parse({}).executor.max_bundle == 512 << 20
    assert _parse({"executor": {"max_bundle": "64MiB"}}).executor.max_bundle == 64 << 20
    assert _parse({"executor": {"max_bundle": 4096}}).executor.max_bundle == 4096


def test_one_warm_actor_per_shape_unless_set() -> None:
    assert _parse({}).executor.warm_actors == 1
    assert _parse({"executor": {"warm_actors": 0}}).executor.warm_actors == 0
    assert _parse({"executor": {"warm_actors": 8}}).executor.warm_actors == 8


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"backend": "k8s"}, "executor.backend"),
        ({"colour": 1}, "unknown key 'executor.colour'"),
        ({"resources": {"gpus": 1}}, "unknown key 'executor.resources.gpus'"),
        ({"resources": {"cpus": -1}}, "executor.resources.cpus"),
        ({"resources": {"memory": "lots"}}, "executor.resources.memory"),
        ({"resources": {"custom": {"CPU": 1}}}, "not a custom resource name"),
        ({"address": ""}, "executor.address"),
        ({"address": "ray://head:10001"}, "Ray Client"),
        ({"max_bundle": "lots"}, "executor.max_bundle"),
        ({"max_bundle": 100}, "executor.max_bundle"),
        ({"max_bundle": 1.5}, "executor.max_bundle"),
        ({"warm_actors": -1}, "executor.warm_actors"),
        ({"warm_actors": 9}, "executor.warm_actors"),
        ({"warm_actors": "one"}, "executor.warm_actors"),
        ({"warm_actors": True}, "executor.warm_actors"),
    ],
)
def test_a_bad_executor_is_refused_naming_the_key(section: dict[str, object], words: str) -> None:
    with pytest.raises(config.ConfigError, match=words.replace(".", r"\.").replace("(", r"\(")):
        _parse({"executor": section})


def test_ray_with_sandbox_none_is_refused() -> None:
    with pytest.raises(config.ConfigError, match='sandbox = "none"'):
        _parse({"sandbox": "none", "executor": {"backend": "ray"}})


def test_passing_the_clusters_token_to_children_is_refused() -> None:
    with pytest.raises(config.ConfigError, match="RAY_AUTH_TOKEN"):
        _parse({"agent": {"env": ["RAY_AUTH_TOKEN"]}})


def test_a_stage_on_ray_needs_ray_even_when_the_executor_is_local() -> None:
    stages = [{"name": "t", "action": "command", "command": ["true"], "backend": "ray"}]
    parsed = _parse({"flows": {"default": {"stages": stages}}})
    stage = parsed.flows["default"].stages[0]
    assert stage.placement is not None
    assert stage.placement.backend == "ray"


def test_resources_merge_key_by_key_and_custom_by_name() -> None:
    defaults = Resources(cpus=1.0, memory=1 << 30, custom=(("agents", 1.0), ("zone", 1.0)))
    own = Resources(cpus=None, memory=2 << 30, custom=(("agents", 2.0),))
    merged = own.over(defaults)
    assert merged == Resources(1.0, 2 << 30, (("agents", 2.0), ("zone", 1.0)))


def test_backend_on_a_sync_stage_is_refused() -> None:
    stages = [{"name": "s", "action": "sync", "backend": "ray"}]
    with pytest.raises(config.ConfigError, match="only for agent and command stages"):
        _parse({"flows": {"default": {"stages": stages}}})
