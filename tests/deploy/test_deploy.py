"""deploy/: the systemd unit, the container files, the Prometheus configuration and
rules, and the Grafana dashboard, each checked by the tool that consumes it where
one can run here.

promtool comes from the Debian package ``prometheus`` and systemd-analyze from
``systemd``; ``make test`` installs both through scripts/ensure-debian-packages.
When one is missing anyway, these tests run that script once themselves, and skip
(with the reason) only the tests that need a tool that still cannot be had.

The Containerfile and compose file are checked as text here against what the design
asks of them; test_container.py, test_compose.py and test_systemd_unit.py build and
run them for real (marker ``deploy``, ``make deploy``).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sloopctl.cli import main as sloopctl_main
from sloopd.cli import main as sloopd_main

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
UNIT = DEPLOY / "systemd" / "sloopd@.service"
CONTAINERFILE = DEPLOY / "container" / "Containerfile"
COMPOSE = DEPLOY / "container" / "compose.yaml"
DASHBOARD = DEPLOY / "grafana" / "sloop-dashboard.json"
DOCS = ROOT / "docs" / "deploy.md"

# The metric names sloopd serves (sloopd/ops/metrics.py), the only ones the rules and
# the dashboard may use; ``up`` comes from Prometheus itself.
METRICS = frozenset(
    {
        "sloop_tickets",
        "sloop_triggers_queued",
        "sloop_triggers_due",
        "sloop_runs_in_flight",
        "sloop_runs_finished_total",
        "sloop_stage_duration_seconds_bucket",
        "sloop_stage_duration_seconds_sum",
        "sloop_stage_duration_seconds_count",
        "sloop_queue_wait_seconds_bucket",
        "sloop_queue_wait_seconds_sum",
        "sloop_queue_wait_seconds_count",
        "sloop_requests_total",
        "sloop_request_duration_seconds_bucket",
        "sloop_request_duration_seconds_sum",
        "sloop_request_duration_seconds_count",
        "sloop_log_records_total",
        "sloop_events_total",
        "sloop_gate_state",
        "sloop_gate_cooldown_until_seconds",
        "sloop_runs_stalled",
        "sloop_store_size_bytes",
        "sloop_log_cache_bytes",
        "sloop_requests_held",
        "sloop_build_info",
        "sloop_agent_tokens_total",
        "sloop_agent_cost_usd_total",
        "sloop_notify_deliveries_total",
        "sloop_notify_attempt_failures_total",
        "sloop_stage_children_running",
        "sloop_ray_shipped_bytes_total",
        "sloop_ray_relay_latency_seconds_bucket",
        "sloop_ray_relay_latency_seconds_sum",
        "sloop_ray_relay_latency_seconds_count",
        "sloop_merge_queue_depth",
        *(f"sloop_merge_queue_wait_seconds_{s}" for s in ("bucket", "sum", "count")),
        *(f"sloop_merge_queue_gate_executions_{s}" for s in ("bucket", "sum", "count")),
        "sloop_merge_queue_rebuilds_total",
        "up",
    }
)
# Their labels, plus the target labels Prometheus adds.
LABELS = frozenset(
    {
        *("job", "instance", "repo", "le", "state", "flow", "stage", "verb", "code"),
        *("version", "vendor", "kind", "outcome", "backend", "node", "direction", "cause"),
    }
)
ALERTS = frozenset(
    {
        "SloopdDown",
        "SloopCooldownLong",
        "SloopRunsStalled",
        "SloopQueueGrowing",
        "SloopRequestErrors",
    }
)

pytestmark = pytest.mark.timeout(900)  # the first use of a tool may install it


# --- tools -------------------------------------------------------------------


@functools.cache
def _tool(command: str, package: str) -> tuple[str | None, str]:
    """The tool's path, installing its Debian package once if need be; else why not."""
    found = shutil.which(command)
    if found:
        return found, ""
    script = ROOT / "scripts" / "ensure-debian-packages"
    try:
        done = subprocess.run(
            [str(script), f"{package}:{command}"],
            capture_output=True,
            text=True,
            timeout=840,
            check=False,
        )
        detail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    except (OSError, subprocess.TimeoutExpired) as exc:
        detail = [str(exc)]
    found = shutil.which(command)
    if found:
        return found, ""
    why = " / ".join(detail) or "no output"
    return None, f"{command} missing and Debian package {package!r} not installable: {why}"


def need(command: str, package: str) -> str:
    path, why = _tool(command, package)
    if path is None:
        print(why)
        pytest.skip(reason=why)
    return path


@pytest.fixture(scope="module")
def promtool() -> str:
    return need("promtool", "prometheus")


@pytest.fixture(scope="module")
def systemd_analyze() -> str:
    return need("systemd-analyze", "systemd")


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


# --- PromQL ------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_WORD = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2"})
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")
_SAMPLE_VALUES = {"__rate_interval": "5m", "__interval": "1m", "__range": "6h", "window": "1h"}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (function names and keywords dropped)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _WORD.finditer(text):
        if text[match.end() :].lstrip().startswith("(") or match.group() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def grouping_labels(expr: str) -> set[str]:
    labels: set[str] = set()
    for inner in _GROUPING.findall(_STRING.sub('""', expr)):
        labels.update(part.strip() for part in inner.split(",") if part.strip())
    return labels


def concrete(expr: str) -> str:
    """A dashboard expression with its Grafana variables replaced by sample values."""
    return _VARIABLE.sub(lambda m: _SAMPLE_VALUES.get(m.group(1), ".*"), expr)


def test_metric_names_reads_promql() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, verb) (rate(sloop_x_bucket{code!="ok"}'
        "[$__rate_interval]))) / ignoring(code) up > 1e3 and on(instance) sloop_y offset 5m"
    )
    assert metric_names(expr) == {"sloop_x_bucket", "up", "sloop_y"}
    assert grouping_labels(expr) == {"le", "verb", "code", "instance"}


# --- Prometheus ----------------------------------------------------------------


def rule_blocks() -> dict[str, str]:
    """Each alert's text in rules.yml, by alert name."""
    text = (PROMETHEUS / "rules.yml").read_text()
    parts = re.split(r"^\s*- alert:\s*", text, flags=re.M)[1:]
    return {part.split()[0]: part for part in parts}


def test_promtool_check_rules(promtool: str) -> None:
    done = run([promtool, "check", "rules", "--lint=all", "--lint-fatal", "rules.yml"], PROMETHEUS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


def test_promtool_test_rules(promtool: str) -> None:
    done = run([promtool, "test", "rules", "rules_test.yml"], PROMETHEUS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_check_config(promtool: str) -> None:
    done = run([promtool, "check", "config", "--lint=all", "prometheus.yml"], PROMETHEUS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 1 rule files found" in done.stdout


def test_scrape_config_targets_the_sloopd_job() -> None:
    text = (PROMETHEUS / "prometheus.yml").read_text()
    assert re.search(r"^rule_files:\s*\n\s*- rules\.yml\s*$", text, flags=re.M)
    assert re.search(r"job_name:\s*sloopd\s*$", text, flags=re.M)
    assert '"127.0.0.1:9464"' in text


def test_every_alert_has_severity_summary_and_description() -> None:
    blocks = rule_blocks()
    assert set(blocks) == ALERTS
    for name, block in blocks.items():
        assert re.search(r"^\s+severity: (critical|warning|info)\s*$", block, re.M), name
        assert re.search(r"^\s+summary: \S", block, re.M), name
        assert re.search(r"^\s+description: \S", block, re.M), name
        assert re.search(r"^\s+for: \d+[smh]\s*$", block, re.M), name


def test_rules_use_only_served_metrics() -> None:
    for name, block in rule_blocks().items():
        expr = block.split("expr:", 1)[1].split("\n        for:", 1)[0]
        names = metric_names(expr.replace(">-", ""))
        assert names, name
        assert names <= METRICS, (name, names - METRICS)
        assert grouping_labels(expr) <= LABELS, name


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    text = (PROMETHEUS / "rules_test.yml").read_text()
    cases = re.findall(r"alertname: (\w+)\s*\n\s*exp_alerts:(.*)", text)
    firing = {name for name, rest in cases if rest.strip() != "[]"}
    quiet = {name for name, rest in cases if rest.strip() == "[]"}
    assert firing == ALERTS
    assert quiet == ALERTS
    # A firing case names every label and annotation the alert carries.
    for block in re.split(r"- exp_labels:", text)[1:]:
        assert "severity:" in block.split("exp_annotations:")[0]
        assert "summary:" in block
        assert "description:" in block


# --- systemd -------------------------------------------------------------------


def unit_directives(text: str) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


UNIT_EXPECTED = {
    "Service": {
        "Type": "notify",
        "NotifyAccess": "main",
        "EnvironmentFile": "/etc/sloopd/%i.env",
        "ExecStart": "/usr/local/bin/sloopd serve --repo ${SLOOP_REPO} "
        "--socket-dir %t/sloop/%i $SLOOPD_ARGS",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "WatchdogSec": "30",
        "KillMode": "mixed",
        "TimeoutStopSec": "20",
        "Restart": "on-failure",
        "User": "sloop",
        "Group": "sloop",
        "RuntimeDirectory": "sloop/%i",
        "RuntimeDirectoryMode": "0700",
        "RuntimeDirectoryPreserve": "no",
        "UMask": "0077",
        "NoNewPrivileges": "yes",
        "PrivateTmp": "yes",
        "ProtectSystem": "full",
        "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "RestrictRealtime": "yes",
        "SystemCallArchitectures": "native",
    },
    "Install": {"WantedBy": "multi-user.target"},
}


def test_unit_has_the_designed_directives() -> None:
    sections = unit_directives(UNIT.read_text())
    for section, expected in UNIT_EXPECTED.items():
        for key, value in expected.items():
            assert sections[section].get(key) == [value], (section, key)
    service = sections["Service"]
    # The store lives in <repo>/.git/sloop, not in a StateDirectory; agents must
    # still be able to write under /home and run JIT runtimes.
    assert "StateDirectory" not in service
    assert service.get("ProtectHome", ["no"]) == ["no"]
    assert service.get("MemoryDenyWriteExecute", ["no"]) == ["no"]
    # systemd waits longer than sloopd's own SIGTERM-then-SIGKILL grace of 5 s.
    assert int(service["TimeoutStopSec"][0]) > 5


def test_unit_command_line_matches_sloopd() -> None:
    serve = CliRunner().invoke(sloopd_main, ["serve", "--help"])
    assert serve.exit_code == 0, serve.output
    for option in ("--repo", "--socket-dir", "--metrics", "--state-dir"):
        assert option in serve.output
    client = CliRunner().invoke(sloopctl_main, ["show", "--help"])
    assert client.exit_code == 0, client.output
    assert "--socket" in client.output


@dataclass(frozen=True, slots=True)
class VerifyCopy:
    unit: Path
    directory: Path


@pytest.fixture
def unit_copy(tmp_path: Path) -> VerifyCopy:
    """The unit as instance sloopd@test, its binary and environment file in tmp_path.

    verify checks that ExecStart's binary is executable, so the copy points at a
    stand-in; it does not read EnvironmentFile= nor look up User=, which are
    resolved when the service starts (the sloop user need not exist here).
    """
    binary = tmp_path / "sloopd"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    (tmp_path / "test.env").write_text("SLOOP_REPO=/srv/sloop/test\n")
    text = UNIT.read_text()
    assert "/usr/local/bin/sloopd " in text
    assert "/etc/sloopd/%i.env" in text
    text = text.replace("/usr/local/bin/sloopd ", f"{binary} ")
    text = text.replace("/etc/sloopd/%i.env", f"{tmp_path}/%i.env")
    unit = tmp_path / "sloopd@test.service"
    unit.write_text(text)
    return VerifyCopy(unit, tmp_path)


def verify(tool: str, copy: VerifyCopy) -> tuple[int, str]:
    done = run(
        [tool, "verify", "--man=no", "--recursive-errors=no", str(copy.unit)], copy.directory
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def test_systemd_analyze_verify_is_clean(systemd_analyze: str, unit_copy: VerifyCopy) -> None:
    # verify exits 0 on warnings such as an unknown key: clean means silent too.
    code, output = verify(systemd_analyze, unit_copy)
    assert (code, output) == (0, "")


def test_systemd_analyze_verify_reports_a_broken_unit(
    systemd_analyze: str, unit_copy: VerifyCopy
) -> None:
    # The control for the test above: the same copy with a typo is not silent.
    text = unit_copy.unit.read_text().replace("KillMode=mixed", "KillMode=mixed\nKilMode=mixed")
    unit_copy.unit.write_text(text)
    _code, output = verify(systemd_analyze, unit_copy)
    assert "KilMode" in output


def test_socket_path_stays_short() -> None:
    # An instance name of 32 characters still leaves the path far below 108 bytes.
    assert len(f"/run/sloop/{'x' * 32}/operator.sock") < 100


def test_example_env_sets_the_repository() -> None:
    text = (DEPLOY / "systemd" / "example.env").read_text()
    assert re.search(r"^SLOOP_REPO=/\S+$", text, flags=re.M)
    assert re.search(r"^SLOOPD_ARGS=--metrics 127\.0\.0\.1:9464$", text, flags=re.M)


# --- container -----------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comment lines dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        result.append((keyword.upper(), args.strip()))
        pending = ""
    assert not pending, "dangling continuation"
    return result


def only(found: list[tuple[str, str]], keyword: str) -> str:
    values = [args for kw, args in found if kw == keyword]
    assert len(values) == 1, (keyword, values)
    return values[0]


def test_containerfile_has_the_required_instructions() -> None:
    found = instructions(CONTAINERFILE.read_text())
    keywords = [kw for kw, _ in found]
    assert found[0] == ("FROM", "python:3.11-slim")
    runs = [args for kw, args in found if kw == "RUN"]
    assert any(re.search(r"apt-get install .*\bgit\b.*\btini\b", r) for r in runs)
    assert any("groupadd --gid 10001 sloop" in r for r in runs)
    assert any("useradd --uid 10001 --gid 10001" in r for r in runs)
    assert any(re.search(r"pip install .*\s\.(\s|$)", r) for r in runs)
    assert only(found, "USER") == "sloop:sloop"
    assert json.loads(only(found, "VOLUME")) == ["/repo", "/run/sloop"]
    assert "SLOOP_SOCKET_DIR=/run/sloop" in only(found, "ENV").split()
    assert json.loads(only(found, "ENTRYPOINT")) == [
        *("tini", "--", "sloopd", "serve", "--repo", "/repo")
    ]
    assert only(found, "HEALTHCHECK").endswith(
        "CMD sloopctl --socket /run/sloop/operator.sock show >/dev/null || exit 1"
    )
    assert only(found, "STOPSIGNAL") == "SIGTERM"
    # Installed as root, run as sloop.
    last_run = max(i for i, kw in enumerate(keywords) if kw == "RUN")
    assert last_run < keywords.index("USER") < keywords.index("ENTRYPOINT")


def test_containerfile_copies_what_pip_needs() -> None:
    found = instructions(CONTAINERFILE.read_text())
    sources = {src for kw, args in found if kw == "COPY" for src in args.split()[:-1]}
    assert sources == {"pyproject.toml", "README.md", "sloopd", "sloopctl"}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["readme"] == "README.md"
    for source in sources:
        assert (ROOT / source).exists(), source


def test_compose_shares_the_bind_mounted_socket_directory_with_a_client() -> None:
    text = COMPOSE.read_text()
    # A bind mount of a host folder, not a named volume: the host's sloopctl must be
    # able to check the directory's owner, which a volume under the engine's
    # storage hides (Permission denied).
    assert text.count(":/run/sloop") == 2
    assert text.count("- ${SLOOP_SOCKETS:?set SLOOP_SOCKETS to the socket directory}") == 2
    assert not re.search(r"^volumes:", text, flags=re.M)
    assert 'user: "10001:10001"' in text
    assert "SLOOP_OPERATOR_SOCKET: /run/sloop/operator.sock" in text
    assert "dockerfile: deploy/container/Containerfile" in text
    context = re.search(r"^\s+context: (\S+)$", text, flags=re.M)
    assert context
    assert (COMPOSE.parent / context.group(1)).resolve() == ROOT
    assert "stop_grace_period: 20s" in text
    # docker-compose 1.29 refuses a top-level name; podman-compose 1.0.3 cannot give a
    # service both network_mode and the project network (tests/deploy/test_compose.py).
    assert not re.search(r"^name:", text, flags=re.M)
    assert "network_mode" not in text


# --- Grafana -------------------------------------------------------------------

DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


@functools.cache
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def panel_exprs() -> Iterator[tuple[str, str]]:
    for panel in panels():
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


def variable_queries() -> Iterator[str]:
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["query"]["query"]


def test_dashboard_identity_and_datasource_variable() -> None:
    board = dashboard()
    assert board["uid"] == "sloop-overview"
    assert board["title"] == "Sloop"
    assert "id" not in board or board["id"] is None
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for panel in panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE


def test_dashboard_uses_only_served_metrics() -> None:
    for title, expr in panel_exprs():
        names = metric_names(expr)
        assert names, title
        assert names <= METRICS, (title, names - METRICS)
        assert grouping_labels(expr) <= LABELS, (title, expr)
    for query in variable_queries():
        match = re.fullmatch(r"label_values\((\w+)\{[^}]*\}, (\w+)\)", query)
        assert match, query
        assert match.group(1) in METRICS
        assert match.group(2) in LABELS


def test_dashboard_has_the_designed_panels() -> None:
    required = {
        "queue depth": [r"\bsloop_triggers_queued\b", r"\bsloop_triggers_due\b"],
        "tickets by state": [r"by \(state\) \(sloop_tickets\{"],
        "runs in flight": [r"\bsloop_runs_in_flight\b"],
        "runs finished by state": [r"by \(state\) \(rate\(sloop_runs_finished_total\{"],
        "stage p50": [
            r"histogram_quantile\(0\.5, sum by \(le, stage\) \(rate\("
            r"sloop_stage_duration_seconds_bucket\{"
        ],
        "stage p95": [
            r"histogram_quantile\(0\.95, sum by \(le, stage\) \(rate\("
            r"sloop_stage_duration_seconds_bucket\{"
        ],
        "request rate by verb": [r"by \(verb\) \(rate\(sloop_requests_total\{"],
        "errors by verb and code": [
            r"by \(verb, code\) \(rate\(sloop_requests_total\{[^}]*"
            r'code!="ok"'
        ],
        "log ingest": [r"rate\(sloop_log_records_total\{"],
        "gate state": [r"\bsloop_gate_state\{"],
    }
    texts = ["\n".join(t["expr"] for t in panel["targets"]) for panel in panels()]
    for what, patterns in required.items():
        assert any(all(re.search(p, text) for p in patterns) for text in texts), what


def test_dashboard_layout() -> None:
    every = dashboard()["panels"]
    ids = [p["id"] for p in every]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[(x, y)] = panel["title"]


def test_dashboard_queries_parse(promtool: str, tmp_path: Path) -> None:
    # Each query, its variables given sample values, as a recording rule for
    # promtool to parse: a typo in PromQL fails here rather than on a blank panel.
    exprs = [expr for _title, expr in panel_exprs()]
    for query in variable_queries():  # label_values(m{...}, l) asks group by (l) (m{...})
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", query)
        assert match, query
        exprs.append(f"group by ({match.group(2)}) ({match.group(1)})")
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for number, expr in enumerate(exprs):
        lines.append(f"      - record: dashboard:query_{number}")
        lines.append(f"        expr: {json.dumps(concrete(expr))}")
    (tmp_path / "dashboard.yml").write_text("\n".join(lines) + "\n")
    done = run([promtool, "check", "rules", "dashboard.yml"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in done.stdout


def test_provisioning_points_at_a_file_provider() -> None:
    text = (DEPLOY / "grafana" / "provisioning.yaml").read_text()
    assert re.search(r"^apiVersion: 1$", text, flags=re.M)
    assert re.search(r"^\s+type: file$", text, flags=re.M)
    assert re.search(r"^\s+path: /\S+$", text, flags=re.M)


# --- docs ------------------------------------------------------------------------


def test_docs_cover_install_and_every_alert() -> None:
    text = DOCS.read_text()
    for alert in ALERTS:
        assert f"### {alert}" in text, alert
    for needle in (
        "useradd",
        "/etc/sloopd/myrepo.env",
        "systemctl enable --now sloopd@myrepo",
        "sloopctl --socket /run/sloop/myrepo/operator.sock show",
        "systemctl reload sloopd@myrepo",
        "journalctl -u sloopd@myrepo",
        "promtool test rules",
        "sloop-overview",
    ):
        assert needle in text, needle
