"""``sloopctl show RUN`` says where each stage ran once any ran on a Ray node."""

from __future__ import annotations

from sloopctl import stages_view as render

NODE = {"id": "573dac2f000926138a138bc9", "host": "worker-3"}


def _stage(name: str, node: dict[str, str] | None) -> dict[str, object]:
    return {"stage": name, "attempt": 1, "state": "passed", "node": node, "reviewers": []}


def _plain(text: str, _style: str) -> str:
    return text


def test_a_node_column_names_host_and_id_and_the_daemons_host_as_a_dash() -> None:
    lines = render.stages_section([_stage("implement", NODE), _stage("sync", None)], 0, _plain)
    header = next(line for line in lines if "STAGE" in line)
    assert "NODE" in header
    implement = next(line for line in lines if line.startswith("implement"))
    assert "worker-3/573dac2f0009" in implement
    sync = next(line for line in lines if line.startswith("sync"))
    assert " - " in sync


def test_no_node_column_when_every_stage_ran_on_the_daemons_host() -> None:
    lines = render.stages_section([_stage("implement", None)], 0, _plain)
    assert not any("NODE" in line for line in lines)


def test_seats_on_nodes_show_theirs() -> None:
    panel = _stage("review", None)
    panel["reviewers"] = [
        {"reviewer": 0, "target": "a", "verdict": "pass", "node": NODE},
        {"reviewer": 1, "target": "b", "verdict": "pass", "node": None},
    ]
    lines = render.stages_section([panel], 0, _plain)
    seat_header = next(line for line in lines if line.startswith("SEAT"))
    assert "NODE" in seat_header
    assert any("worker-3/573dac2f0009" in line for line in lines)
