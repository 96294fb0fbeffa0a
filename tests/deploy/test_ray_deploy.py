"""deploy/ray/: the KubeRay RayCluster, its Secret, the node image and the plain-host
units and script, checked offline against what consumes them.

There is no Kubernetes cluster, no Ray and no image build here, so each file is checked
as far as something local can read it the way its consumer does:

* ``raycluster.yaml`` against the RayCluster CRD's own OpenAPI v3 schema, vendored from
  KubeRay (``deploy/ray/schema/``), by jsonschema extended with the Kubernetes rules a
  plain JSON Schema validator does not know: ``nullable``, ``x-kubernetes-int-or-string``,
  ``x-kubernetes-preserve-unknown-fields`` (and, without it, unknown fields refused, as
  ``kubectl apply`` does with its default ``--validate=strict``), list-type ``set`` and
  ``map`` uniqueness, and the ``int32``/``int64`` formats.  Not evaluated: the CEL rules of
  ``x-kubernetes-validations`` (two, both about fields this manifest does not set) and
  whatever the operator's webhook checks beyond the schema.  Negative tests show the
  validator refuses the mistakes it exists to catch.
* the worker group's ``rayStartParams.resources`` through a real bash, rendered the way
  KubeRay renders ``ray start`` flags, and through the Ray autoscaler's reading of it;
* the systemd units with configparser, and with ``systemd-analyze verify`` where it is
  installed;
* ``start-hosts.sh`` run for real against a stand-in ``ray`` that records its arguments;
* the Containerfile as text (Docker is not available to build it).
"""

from __future__ import annotations

import configparser
import copy
import functools
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft4Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from tests.support.agent_clis import PINNED

ROOT = Path(__file__).resolve().parents[2]
RAY = ROOT / "deploy" / "ray"
SCHEMA = RAY / "schema" / "rayclusters.ray.io.v1.json"
CLUSTER = RAY / "raycluster.yaml"
SECRET = RAY / "secret.yaml"
CONTAINERFILE = RAY / "Containerfile"
HEAD_UNIT = RAY / "ray-head.service"
WORKER_UNIT = RAY / "ray-worker.service"
ENV_EXAMPLE = RAY / "ray.env.example"
START_HOSTS = RAY / "start-hosts.sh"
DOCS = ROOT / "docs" / "deploy.md"

RAY_VERSION = "2.60.0"
TOKEN_SECRET = {"name": "sloop-ray-token", "key": "token"}
# What one stage asks of Ray (sloop.toml's [executor] resources in docs/scale-out.md:
# cpus = 1, memory = "2GiB", custom = { agents = 1 }).
STAGE_CPUS = 1
STAGE_MEMORY = 2 * 2**30


def sloop_version() -> str:
    """The version in pyproject.toml: the daemon's, which every node must match."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        version = tomllib.load(file)["project"]["version"]
    assert isinstance(version, str)
    return version


# --- a Kubernetes-flavoured JSON Schema validator --------------------------------

_DRAFT4 = Draft4Validator.VALIDATORS
Errors = Iterator[ValidationError]


def _type(validator: Validator, types: Any, instance: Any, schema: Mapping[str, Any]) -> Errors:
    """``type``, except that ``nullable: true`` (OpenAPI 3.0) also admits null."""
    if instance is None and schema.get("nullable") is True:
        return
    yield from _DRAFT4["type"](validator, types, instance, schema)


def _properties(
    validator: Validator, properties: Any, instance: Any, schema: Mapping[str, Any]
) -> Errors:
    """``properties``, refusing fields the schema does not name.

    Kubernetes prunes unknown fields of a structural schema, and ``kubectl apply``
    (``--validate=strict``, its default) refuses them, so a misspelt field is an error
    there rather than a silently ignored setting; JSON Schema would accept it.  Maps
    (``additionalProperties``) and ``x-kubernetes-preserve-unknown-fields`` keep theirs.
    """
    yield from _DRAFT4["properties"](validator, properties, instance, schema)
    if not isinstance(instance, dict) or "additionalProperties" in schema:
        return
    if schema.get("x-kubernetes-preserve-unknown-fields") is True:
        return
    known = set(properties)
    if schema.get("x-kubernetes-embedded-resource") is True:
        known |= {"apiVersion", "kind", "metadata"}
    for name in sorted(set(instance) - known):
        yield ValidationError(f"unknown field {name!r}", path=[name])


def _int_or_string(validator: Validator, value: Any, instance: Any, schema: Any) -> Errors:
    """``x-kubernetes-int-or-string: true``: an integer or a string, nothing else."""
    del validator, schema
    integer = isinstance(instance, int) and not isinstance(instance, bool)
    if value is True and not (integer or isinstance(instance, str)):
        yield ValidationError(f"{instance!r} is neither an integer nor a string")


def _list_type(
    validator: Validator, value: Any, instance: Any, schema: Mapping[str, Any]
) -> Errors:
    """``x-kubernetes-list-type``: ``set`` items unique, ``map`` items unique by key.

    The API server refuses two containers named alike or two ports with the same
    (containerPort, protocol); a key left out counts as its default (protocol TCP).
    """
    del validator
    if not isinstance(instance, list) or value not in ("set", "map"):
        return
    keys: list[str] = list(schema.get("x-kubernetes-list-map-keys", []))
    defaults = schema.get("items", {}).get("properties", {})
    seen: set[str] = set()
    for item in instance:
        if value == "map" and isinstance(item, dict):
            ident = [item.get(key, defaults.get(key, {}).get("default")) for key in keys]
        else:
            ident = item
        text = json.dumps(ident, sort_keys=True)
        if text in seen:
            yield ValidationError(f"duplicate entry {text} in a list of type {value}")
        seen.add(text)


FORMATS = FormatChecker(formats=())


@FORMATS.checks("int32")
def _int32(instance: object) -> bool:
    return not isinstance(instance, int) or -(2**31) <= instance < 2**31


@FORMATS.checks("int64")
def _int64(instance: object) -> bool:
    return not isinstance(instance, int) or -(2**63) <= instance < 2**63


KubeValidator = validators.create(
    meta_schema=Draft4Validator.META_SCHEMA,
    validators={
        **_DRAFT4,
        "type": _type,
        "properties": _properties,
        "x-kubernetes-int-or-string": _int_or_string,
        "x-kubernetes-list-type": _list_type,
    },
    type_checker=Draft4Validator.TYPE_CHECKER,
    format_checker=FORMATS,
)


@functools.cache
def raycluster_schema() -> dict[str, Any]:
    schema = json.loads(SCHEMA.read_text())
    assert isinstance(schema, dict)
    return schema


def errors_of(instance: Any, schema: Mapping[str, Any]) -> list[str]:
    """Every violation as ``path: message``, the path in kubectl's dotted form."""
    found = KubeValidator(schema, format_checker=FORMATS).iter_errors(instance)
    lines = []
    for error in found:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        lines.append(f"{path.lstrip('.') or '<root>'}: {error.message}")
    return sorted(lines)


def raycluster_errors(manifest: Any) -> list[str]:
    return errors_of(manifest, raycluster_schema())


# --- the validator on small schemas: what each Kubernetes rule admits -------------

QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}


@pytest.mark.parametrize("value", [4, "4", "500m", "2Gi"])
def test_int_or_string_admits_integers_and_strings(value: object) -> None:
    assert errors_of(value, QUANTITY) == []
    assert errors_of(value, {"x-kubernetes-int-or-string": True}) == []


@pytest.mark.parametrize("value", [1.5, True, None, ["1"], {"cpu": 1}])
def test_int_or_string_refuses_anything_else(value: object) -> None:
    # The bare extension too: a schema with no anyOf still holds it to int or string.
    assert errors_of(value, {"x-kubernetes-int-or-string": True}) != []


def test_unknown_fields_are_refused_unless_preserved() -> None:
    closed = {"type": "object", "properties": {"name": {"type": "string"}}}
    assert errors_of({"name": "a", "nmae": "b"}, closed) == ["nmae: unknown field 'nmae'"]
    preserved = {**closed, "x-kubernetes-preserve-unknown-fields": True}
    assert errors_of({"name": "a", "anything": {"at": "all"}}, preserved) == []
    a_map = {"type": "object", "additionalProperties": {"type": "string"}}
    assert errors_of({"any-key": "v"}, a_map) == []
    assert errors_of({"any-key": 1}, a_map) == ["any-key: 1 is not of type 'string'"]


def test_nullable_admits_null_only_where_declared() -> None:
    assert errors_of(None, {"type": "string", "nullable": True}) == []
    assert errors_of(None, {"type": "string"}) == ["<root>: None is not of type 'string'"]


def test_list_map_keys_are_unique_with_defaults() -> None:
    ports = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
        "items": {
            "type": "object",
            "properties": {
                "containerPort": {"type": "integer"},
                "protocol": {"type": "string", "default": "TCP"},
            },
        },
    }
    assert errors_of([{"containerPort": 80}, {"containerPort": 80, "protocol": "UDP"}], ports) == []
    twice = [{"containerPort": 80}, {"containerPort": 80, "protocol": "TCP"}]
    assert len(errors_of(twice, ports)) == 1


def test_int32_format_is_enforced() -> None:
    int32 = {"type": "integer", "format": "int32"}
    assert errors_of(2**31 - 1, int32) == []
    assert errors_of(2**31, int32) != []


# --- the vendored schema ------------------------------------------------------------


def test_vendored_schema_is_the_raycluster_v1_schema() -> None:
    schema = raycluster_schema()
    KubeValidator.check_schema(schema)  # a well-formed schema under the draft-4 metaschema
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["headGroupSpec"]
    group = spec["properties"]["workerGroupSpecs"]["items"]
    assert {"groupName", "minReplicas", "maxReplicas", "template"} <= set(group["required"])
    # The pod template is KubeRay's full PodTemplateSpec, down to the fields the
    # worker's sandbox relies on: those are validated, not waved through.
    pod = group["properties"]["template"]["properties"]["spec"]["properties"]
    assert "hostUsers" in pod
    context = pod["containers"]["items"]["properties"]["securityContext"]["properties"]
    assert {"procMount", "seccompProfile", "appArmorProfile", "capabilities"} <= set(context)


def test_vendored_schema_names_its_source() -> None:
    note = (RAY / "schema" / "README.md").read_text()
    assert "ray-project/kuberay" in note
    assert "ray-operator/config/crd/bases/ray.io_rayclusters.yaml" in note
    assert "spec.versions[name=v1].schema.openAPIV3Schema" in note
    assert re.search(r"commit `[0-9a-f]{40}`", note)


# --- raycluster.yaml against the schema -------------------------------------------------


def load_manifest() -> dict[str, Any]:
    documents = list(yaml.safe_load_all(CLUSTER.read_text()))
    assert len(documents) == 1
    (manifest,) = documents
    assert isinstance(manifest, dict)
    return manifest


def test_raycluster_is_valid_against_the_crd_schema() -> None:
    manifest = load_manifest()
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayCluster")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", manifest["metadata"]["name"])
    assert raycluster_errors(manifest) == []


def _worker(manifest: dict[str, Any]) -> dict[str, Any]:
    group = manifest["spec"]["workerGroupSpecs"][0]
    assert isinstance(group, dict)
    return group


def _worker_container(manifest: dict[str, Any]) -> dict[str, Any]:
    container = _worker(manifest)["template"]["spec"]["containers"][0]
    assert isinstance(container, dict)
    return container


def _set_replicas(manifest: dict[str, Any]) -> None:
    _worker(manifest)["replicas"] = "two"


def _unquoted_num_cpus(manifest: dict[str, Any]) -> None:
    manifest["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0


def _misspelt_field(manifest: dict[str, Any]) -> None:
    _worker(manifest)["rayStartParam"] = _worker(manifest).pop("rayStartParams")


def _misspelt_security_field(manifest: dict[str, Any]) -> None:
    context = _worker_container(manifest)["securityContext"]
    context["procmount"] = context.pop("procMount")


def _boolean_cpu_limit(manifest: dict[str, Any]) -> None:
    _worker_container(manifest)["resources"]["limits"]["cpu"] = True


def _bad_quantity(manifest: dict[str, Any]) -> None:
    _worker_container(manifest)["resources"]["limits"]["memory"] = "12 GB"


def _two_containers_alike(manifest: dict[str, Any]) -> None:
    containers = _worker(manifest)["template"]["spec"]["containers"]
    containers.append(copy.deepcopy(containers[0]))


def _replicas_overflow(manifest: dict[str, Any]) -> None:
    _worker(manifest)["maxReplicas"] = 2**31


def _no_group_name(manifest: dict[str, Any]) -> None:
    del _worker(manifest)["groupName"]


def _secret_ref_without_key(manifest: dict[str, Any]) -> None:
    del _worker_container(manifest)["env"][1]["valueFrom"]["secretKeyRef"]["key"]


def _host_users_as_string(manifest: dict[str, Any]) -> None:
    _worker(manifest)["template"]["spec"]["hostUsers"] = "false"


WORKER = "spec.workerGroupSpecs[0]"
CONTAINER = f"{WORKER}.template.spec.containers[0]"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_set_replicas, f"{WORKER}.replicas: 'two' is not of type 'integer'"),
        (
            _unquoted_num_cpus,
            "spec.headGroupSpec.rayStartParams.num-cpus: 0 is not of type 'string'",
        ),
        (_misspelt_field, f"{WORKER}.rayStartParam: unknown field 'rayStartParam'"),
        (
            _misspelt_security_field,
            f"{CONTAINER}.securityContext.procmount: unknown field 'procmount'",
        ),
        (_boolean_cpu_limit, f"{CONTAINER}.resources.limits.cpu: True is neither"),
        (_bad_quantity, f"{CONTAINER}.resources.limits.memory: '12 GB' does not match"),
        (_two_containers_alike, f"{WORKER}.template.spec.containers: duplicate entry"),
        (_replicas_overflow, f"{WORKER}.maxReplicas: 2147483648 is not a 'int32'"),
        (_no_group_name, f"{WORKER}: 'groupName' is a required property"),
        (
            _secret_ref_without_key,
            f"{CONTAINER}.env[1].valueFrom.secretKeyRef: 'key' is a required property",
        ),
        (_host_users_as_string, f"{WORKER}.template.spec.hostUsers: 'false' is not of type"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_a_broken_raycluster_is_refused(
    mutate: Callable[[dict[str, Any]], None], expected: str
) -> None:
    # The control for the test above: each mistake on its own is caught, and named.
    manifest = load_manifest()
    mutate(manifest)
    found = raycluster_errors(manifest)
    assert any(line.startswith(expected) for line in found), found


# --- raycluster.yaml: what Sloop needs of it ---------------------------------------------


def groups(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The head group and each worker group, by a name for messages."""
    found = {"head": manifest["spec"]["headGroupSpec"]}
    for group in manifest["spec"]["workerGroupSpecs"]:
        found[group["groupName"]] = group
    return found


def ray_containers(group: dict[str, Any]) -> list[dict[str, Any]]:
    containers = group["template"]["spec"]["containers"]
    assert isinstance(containers, list)
    return containers


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_every_node_runs_with_the_token_from_the_secret() -> None:
    for name, group in groups(load_manifest()).items():
        for container in ray_containers(group):
            env = env_of(container)
            assert env["RAY_AUTH_MODE"] == "token", name
            assert env["RAY_AUTH_TOKEN"] == {"secretKeyRef": TOKEN_SECRET}, name


def test_the_secret_holds_the_key_the_cluster_reads_and_only_a_placeholder() -> None:
    (secret,) = yaml.safe_load_all(SECRET.read_text())
    assert (secret["apiVersion"], secret["kind"], secret["type"]) == ("v1", "Secret", "Opaque")
    assert secret["metadata"]["name"] == TOKEN_SECRET["name"]
    assert "data" not in secret  # nothing base64-encoded that could pass for a real one
    token = secret["stringData"][TOKEN_SECRET["key"]]
    assert token.startswith("REPLACE-ME")
    text = SECRET.read_text()
    assert "openssl rand -hex 32" in text
    assert "ray get-auth-token --generate" in text


def kuberay_flags(params: Mapping[str, str]) -> str:
    """``ray start`` flags as KubeRay writes them into the container's ``bash -lc``.

    After convertParamMap in KubeRay's ray-operator/controllers/ray/common/pod.go: keys
    sorted, "true" a bare flag, "false" dropped (but for a few options that take it as
    a value), anything else ``--key=value`` verbatim, for the shell to unquote.
    """
    valued = {"log-color", "include-dashboard", "include-log-monitor"}
    flags = []
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in valued:
            if value.lower() == "true":
                flags.append(f"--{key}")
        else:
            flags.append(f"--{key}={value}")
    return " ".join(flags)


def bash_argv(command: str) -> list[str]:
    """The argv a real bash makes of ``command``'s words."""
    done = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {command}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.split("\0")[:-1]


def test_the_workers_offer_the_agents_resource() -> None:
    worker = _worker(load_manifest())
    params = worker["rayStartParams"]
    argv = bash_argv(kuberay_flags(params))
    (resources,) = [arg for arg in argv if arg.startswith("--resources=")]
    agents = json.loads(resources.removeprefix("--resources="))
    assert agents == {"agents": 4}
    # The Ray autoscaler reads the same parameter its own way (ray's
    # autoscaler/_private/kuberay/autoscaling_config.py, _get_custom_resources).
    assert json.loads(params["resources"][1:-1].replace("\\", "")) == agents
    assert "--disable-usage-stats" in argv
    # Enough CPU and memory for as many stages as there are `agents`.
    limits = ray_containers(worker)[0]["resources"]["limits"]
    assert quantity(limits["cpu"]) >= agents["agents"] * STAGE_CPUS
    assert quantity(limits["memory"]) >= agents["agents"] * STAGE_MEMORY


def test_the_head_runs_no_stage() -> None:
    head = load_manifest()["spec"]["headGroupSpec"]
    argv = bash_argv(kuberay_flags(head["rayStartParams"]))
    assert "--num-cpus=0" in argv
    assert not any(arg.startswith("--resources=") for arg in argv)
    context = ray_containers(head)[0]["securityContext"]
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}


_SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def quantity(value: str | int) -> float:
    """A Kubernetes quantity ("500m", "12Gi", 4) as a number."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", str(value))
    assert match, value
    return float(match.group(1)) * _SUFFIXES.get(match.group(2), 1)


def test_every_container_has_requests_and_limits() -> None:
    for name, group in groups(load_manifest()).items():
        for container in ray_containers(group):
            resources = container["resources"]
            for kind in ("cpu", "memory"):
                request = quantity(resources["requests"][kind])
                assert 0 < request <= quantity(resources["limits"][kind]), (name, kind)


def test_the_workers_let_bubblewrap_sandbox_as_non_root() -> None:
    pod = _worker(load_manifest())["template"]["spec"]
    # A user-namespaced pod: the only kind Kubernetes lets have an unmasked /proc.
    assert pod["hostUsers"] is False
    context = _worker_container(load_manifest())["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] != 0
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}  # nothing added, SYS_ADMIN least
    assert context["procMount"] == "Unmasked"
    assert context["seccompProfile"] == {"type": "Unconfined"}
    assert context["appArmorProfile"] == {"type": "Unconfined"}
    text = CLUSTER.read_text()
    for reason in ("user namespace", "fresh /proc", "CLONE_NEWUSER", "SYS_ADMIN"):
        assert reason in text, reason


def test_the_node_dir_is_on_an_empty_dir() -> None:
    pod = _worker(load_manifest())["template"]["spec"]
    container = pod["containers"][0]
    node_dir = env_of(container)["SLOOP_NODE_DIR"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == node_dir]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" in volume
    assert "sizeLimit" in volume["emptyDir"]


def test_every_node_runs_this_sloop_and_ray() -> None:
    manifest = load_manifest()
    assert manifest["spec"]["rayVersion"] == RAY_VERSION
    images = {c["image"] for group in groups(manifest).values() for c in ray_containers(group)}
    assert images == {f"ghcr.io/example/sloop-ray-worker:{sloop_version()}"}


# --- the Containerfile --------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comment lines dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), " ".join(rest.split())))
    return found


def build_args(found: list[tuple[str, str]]) -> dict[str, str]:
    return dict(arg.split("=", 1) for keyword, arg in found if keyword == "ARG" and "=" in arg)


def expanded_runs(found: list[tuple[str, str]]) -> list[str]:
    """Each RUN's command with the ARG defaults put in, as a default build runs it."""
    args = build_args(found)
    return [
        re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), rest)
        for keyword, rest in found
        if keyword == "RUN"
    ]


def test_containerfile_base_and_user() -> None:
    found = instructions(CONTAINERFILE.read_text())
    bases = [rest for keyword, rest in found if keyword == "FROM"]
    final = bases[-1]
    assert re.fullmatch(
        rf"(docker\.io/library/)?python:3\.11[\w.-]*|(docker\.io/)?rayproject/ray:{RAY_VERSION}-py311",
        final,
    ), final
    (user,) = [rest for keyword, rest in found if keyword == "USER"]
    assert user.split(":")[0] not in ("root", "0")
    env = " ".join(rest for keyword, rest in found if keyword == "ENV")
    assert "SLOOP_NODE_DIR=/sloop-node" in env


def test_containerfile_installs_the_sandbox_and_git() -> None:
    runs = expanded_runs(instructions(CONTAINERFILE.read_text()))
    (apt,) = [run for run in runs if "apt-get install" in run]
    for package in ("bubblewrap", "git", "ca-certificates"):
        assert re.search(rf"\s{re.escape(package)}(\s|$)", apt), package


def test_containerfile_installs_the_pinned_agent_clis() -> None:
    runs = expanded_runs(instructions(CONTAINERFILE.read_text()))
    (npm,) = [run for run in runs if "npm install -g" in run]
    # The versions Sloop's own tests run each CLI at.
    for spec in PINNED.values():
        assert f'"{spec}"' in npm, spec
    for command in PINNED:
        assert f"{command} --version" in npm, command


def test_containerfile_pins_ray_and_this_sloop() -> None:
    found = instructions(CONTAINERFILE.read_text())
    args = build_args(found)
    assert args["RAY_VERSION"] == RAY_VERSION
    assert args["SLOOP_VERSION"] == sloop_version()
    (pip,) = [run for run in expanded_runs(found) if "pip install" in run]
    assert re.search(rf'"ray\[[\w,]*default[\w,]*\]=={re.escape(RAY_VERSION)}"', pip), pip
    assert '".[ray]"' in pip  # Sloop from the build context, with its ray extra
    assert '[ "$installed" = "' + sloop_version() + '" ]' in pip
    copied = " ".join(rest for keyword, rest in found if keyword == "COPY")
    for needed in ("pyproject.toml", "README.md", "sloopd", "sloopctl"):
        assert needed in copied, needed


# --- plain hosts: the systemd units ------------------------------------------------------


class UnitParser(configparser.RawConfigParser):
    """A unit file as configparser reads INI: section names and keys as written."""

    def __init__(self) -> None:
        super().__init__(strict=False, interpolation=None, delimiters=("=",))

    def optionxform(self, optionstr: str) -> str:
        return optionstr


def unit(path: Path) -> UnitParser:
    parser = UnitParser()
    parser.read_string(path.read_text(), source=str(path))
    return parser


def env_example() -> dict[str, str]:
    pairs = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key] = value
    return pairs


def exec_argv(parser: UnitParser, env: Mapping[str, str]) -> list[str]:
    """ExecStart split and its ``${VAR}`` filled in, as systemd does at start."""
    words = shlex.split(parser["Service"]["ExecStart"])
    return [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], word) for word in words]


@pytest.mark.parametrize("path", [HEAD_UNIT, WORKER_UNIT], ids=lambda p: p.name)
def test_units_run_ray_blocking_with_the_token_file(path: Path) -> None:
    parser = unit(path)
    assert parser.sections() == ["Unit", "Service", "Install"]
    service = parser["Service"]
    assert service["EnvironmentFile"] == "/etc/sloopd/ray.env"
    assert service["User"] not in ("root", "0")
    assert service["KillMode"] == "control-group"
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    argv = exec_argv(parser, env_example())
    assert argv[:2] == ["/opt/sloop/venv/bin/ray", "start"]
    assert "--block" in argv
    # Every variable ExecStart uses comes from the environment file.
    for name in re.findall(r"\$\{(\w+)\}", service["ExecStart"]):
        assert name in env_example(), name


def test_head_unit_starts_a_head_that_runs_no_stage() -> None:
    argv = exec_argv(unit(HEAD_UNIT), env_example())
    for flag in (
        "--head",
        "--port=6379",
        "--num-cpus=0",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--node-ip-address={env_example()['RAY_NODE_IP']}",
    ):
        assert flag in argv, flag


def test_worker_unit_offers_agents_and_keeps_the_sandbox_possible() -> None:
    parser = unit(WORKER_UNIT)
    argv = exec_argv(parser, env_example())
    assert f"--address={env_example()['RAY_HEAD_ADDRESS']}" in argv
    (resources,) = [arg for arg in argv if arg.startswith("--resources=")]
    assert json.loads(resources.removeprefix("--resources=")) == {"agents": 4}
    service = parser["Service"]
    assert service["Environment"] == "SLOOP_NODE_DIR=%S/sloop-node"
    assert service["StateDirectory"] == "sloop-node"
    # Each of these would keep bubblewrap from making its namespaces or its /proc.
    for refused in ("RestrictNamespaces", "PrivateUsers", "ProtectProc", "ProtectKernelTunables"):
        assert refused not in service, refused


def test_env_example_turns_token_auth_on_with_a_placeholder() -> None:
    env = env_example()
    assert env["RAY_AUTH_MODE"] == "token"
    assert env["RAY_AUTH_TOKEN"].startswith("REPLACE-ME")
    assert re.fullmatch(r"[1-9]\d*", env["SLOOP_AGENTS"])


def verify(tool: str, path: Path, tmp_path: Path) -> tuple[int, str]:
    """systemd-analyze verify on a copy whose ray is a stand-in (verify wants it to exist)."""
    ray = tmp_path / "ray"
    ray.write_text("#!/bin/sh\nexit 0\n")
    ray.chmod(0o755)
    text = path.read_text().replace("/opt/sloop/venv/bin/ray ", f"{ray} ")
    text = text.replace("/etc/sloopd/ray.env", f"{tmp_path}/ray.env")
    copied = tmp_path / path.name
    copied.write_text(text)
    done = subprocess.run(
        [tool, "verify", "--man=no", "--recursive-errors=no", str(copied)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    return tool


@pytest.mark.parametrize("path", [HEAD_UNIT, WORKER_UNIT], ids=lambda p: p.name)
def test_systemd_analyze_verify_is_clean(path: Path, tmp_path: Path) -> None:
    assert verify(systemd_analyze(), path, tmp_path) == (0, "")


def test_systemd_analyze_verify_reports_a_broken_unit(tmp_path: Path) -> None:
    # The control for the test above: a misspelt key is not silent.
    broken = tmp_path / "src" / WORKER_UNIT.name
    broken.parent.mkdir()
    text = WORKER_UNIT.read_text().replace("KillMode=", "KilMode=")
    broken.write_text(text)
    _code, output = verify(systemd_analyze(), broken, tmp_path)
    assert "KilMode" in output


# --- plain hosts: start-hosts.sh ------------------------------------------------------------


def start_hosts(tmp_path: Path, *args: str, token: str | None = "t0ken") -> tuple[int, str]:
    """Run start-hosts.sh with a stand-in ray; the stand-in's argv and auth env, or stderr."""
    record = tmp_path / "ray-argv"
    ray = tmp_path / "fake-ray"
    script = f'printf "%s\\n" "$RAY_AUTH_MODE" "$RAY_AUTH_TOKEN" "$@" > "{record}"'
    ray.write_text(f"#!/bin/sh\n{script}\n")
    ray.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "RAY": str(ray)}
    if token is not None:
        env["RAY_AUTH_TOKEN"] = token
    done = subprocess.run(
        [str(START_HOSTS), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode == 0:
        return 0, record.read_text()
    return done.returncode, done.stderr


def test_start_hosts_starts_a_head(tmp_path: Path) -> None:
    code, recorded = start_hosts(tmp_path, "head", "192.0.2.10")
    assert code == 0, recorded
    mode, token, *argv = recorded.splitlines()
    assert (mode, token) == ("token", "t0ken")
    assert argv == [
        *("start", "--head", "--node-ip-address", "192.0.2.10", "--port", "6379"),
        *("--num-cpus", "0", "--include-dashboard", "false", "--disable-usage-stats"),
    ]


def test_start_hosts_starts_a_worker_offering_agents(tmp_path: Path) -> None:
    code, recorded = start_hosts(tmp_path, "worker", "192.0.2.10:6379", "6")
    assert code == 0, recorded
    mode, token, *argv = recorded.splitlines()
    assert (mode, token) == ("token", "t0ken")
    assert argv[:3] == ["start", "--address", "192.0.2.10:6379"]
    assert json.loads(argv[argv.index("--resources") + 1]) == {"agents": 6}
    _code, recorded = start_hosts(tmp_path, "worker", "192.0.2.10:6379")
    argv = recorded.splitlines()[2:]
    assert json.loads(argv[argv.index("--resources") + 1]) == {"agents": 4}


@pytest.mark.parametrize(
    ("args", "token", "message"),
    [
        (("head", "192.0.2.10"), None, "RAY_AUTH_TOKEN is not set"),
        (("head", "192.0.2.10"), "", "RAY_AUTH_TOKEN is not set"),
        (("worker", "192.0.2.10:6379", "four"), "t", "AGENTS must be a positive integer"),
        (("worker", "192.0.2.10:6379", "0"), "t", "AGENTS must be a positive integer"),
        (("client", "192.0.2.10"), "t", "start-hosts.sh head NODE_IP"),
        (("head",), "t", "start-hosts.sh head NODE_IP"),
    ],
)
def test_start_hosts_refuses(
    tmp_path: Path, args: tuple[str, ...], token: str | None, message: str
) -> None:
    code, stderr = start_hosts(tmp_path, *args, token=token)
    assert code == 2
    assert message in stderr


# --- docs -----------------------------------------------------------------------------------


def test_docs_describe_both_ways_and_point_at_the_daemon_side() -> None:
    text = DOCS.read_text()
    assert "## Stages on a Ray cluster" in text
    section = text.split("## Stages on a Ray cluster", 1)[1].split("\n## ", 1)[0]
    for needle in (
        "scale-out.md",
        "ray start --head",
        "deploy/ray/start-hosts.sh",
        "ray-worker.service",
        "apply -f deploy/ray/raycluster.yaml",
        "sloop-ray-token",
        "RAY_AUTH_MODE=token",
        "RAY_AUTH_TOKEN",
        "ray get-auth-token --generate",
        "bubblewrap",
        "SLOOP_NODE_DIR",
        "procMount: Unmasked",
        "hostUsers: false",
        "deploy/ray/Containerfile",
    ):
        assert needle in section, needle
    for spec in PINNED.values():
        assert spec.rsplit("@", 1)[0] in section, spec
