"""The image tag every deploy file and docs/deploy.md names is the package's version.

The tags once said 0.4.0 and 0.5.0 while the package was 0.8.0: whoever copied a
command built or ran an image named after a release it was not. A plain text check,
so it runs in the main suite (no podman needed).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The daemon's image is localhost/sloopd (or sloopd) tagged with a version.
TAG = re.compile(r"\bsloopd:(\d+\.\d+\.\d+\S*)")
FILES = (
    ROOT / "deploy/container/Containerfile",
    ROOT / "deploy/container/compose.yaml",
    ROOT / "docs/deploy.md",
)


def test_every_image_tag_is_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    found = {path.name: TAG.findall(path.read_text()) for path in FILES}
    for name, tags in found.items():
        assert tags, f"{name} names no image tag"
        assert set(tags) == {version}, (name, tags)


def test_the_check_sees_a_stale_tag() -> None:
    # The control: an old tag in a line like the docs' is found and differs.
    assert TAG.findall("docker build -t localhost/sloopd:0.4.0 .") == ["0.4.0"]
