"""The deployment manifests (infra/k8s, infra/compose), validated offline.

- Syntax: every YAML file parses; the core Kubernetes objects validate against the
  Kubernetes OpenAPI schemas bundled in `kubernetes-validate` (strict: unknown fields fail);
  KEDA's ScaledObjects (a CRD, no bundled schema) against a minimal JSON schema of the
  fields we use, written below; the kustomization structurally.
- Cross-checks against the code, which matter more than syntax: environment variables are
  declared settings and parse; autoscaling never asks for more consumers than the consumed
  topics have partitions (consumer groups and topics computed by the code itself); every
  command runs a module that exists, the same ones in compose and Kubernetes; secrets are
  referenced, never stored; probes, grace periods and GPU scheduling fit what the roles do.

Each check returns its problems; `test_checks_catch_*` break a copy on purpose and assert the
check notices, so none of them passes vacuously.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import importlib.util
import os
import re
import secrets as secrets_module
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

import schemas.topics as topics_module
from runtime.exposure import exposure_problems
from runtime.processes import ROLES
from runtime.settings import DEV_TENANT_REGISTRY, Settings
from schemas.channels import RedisNames
from schemas.errors import SettingsError
from schemas.topics import REGISTRY, all_topics
from workers.inference.engines.engine_profile import turns_held
from workers.safety.app import MAX_INFLIGHT as SAFETY_INFLIGHT

REPO = Path(__file__).resolve().parents[3]
K8S = REPO / "infra" / "k8s"
COMPOSE_DIR = REPO / "infra" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
DOCKERFILE = COMPOSE_DIR / "Dockerfile"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"
PROBE = K8S / "probe.py"
K8S_VERSION = "1.33"  # the oldest minor we support; kubernetes-validate bundles its schemas

SETTINGS_ENV = {f.metadata["env"] for f in dataclasses.fields(Settings)}
SECRET_NAME = "turnstream-secrets"
SECRET_ENV = {
    "TURNSTREAM_AUTH_SECRET": "auth-secret",
    "TURNSTREAM_CLICKHOUSE_URL": "clickhouse-url",
    "TURNSTREAM_METRICS_TOKEN": "metrics-token",
}
DEV_SECRET = Settings().auth_secret  # the local-only default: must never reach a deployment
# Variables a container may carry that are not turnstream settings (the image's own).
IMAGE_ENV = {
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PIP_NO_CACHE_DIR",
    "PIP_DISABLE_PIP_VERSION_CHECK",
    "HF_HUB_OFFLINE",
}
# .env.example keys that only compose interpolates (never a container's environment).
COMPOSE_ONLY_VARS = {"CLICKHOUSE_PASSWORD", "EDGE_PUBLISHED_PORT", "EDGE_HTTP_PUBLISHED_PORT"}
ONE_SHOT_MODULES = {"runtime.kafka_topics", "runtime.clickhouse.migrate"}
PROBE_IN_IMAGE = "/app/infra/k8s/probe.py"


# --- loading -------------------------------------------------------------------------------


@dataclass
class Doc:
    path: Path
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.obj.get("kind", "")

    @property
    def name(self) -> str:
        return self.obj.get("metadata", {}).get("name", "")


def load_k8s() -> list[Doc]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [Doc(path, d) for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d.kind == kind]


def workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d.kind in {"Deployment", "Job"}]


def pod_spec(doc: Doc) -> dict[str, Any]:
    return doc.obj["spec"]["template"]["spec"]


def containers(doc: Doc) -> list[dict[str, Any]]:
    return pod_spec(doc)["containers"]


def configmap_data(docs: list[Doc]) -> dict[str, str]:
    maps = of_kind(docs, "ConfigMap")
    assert len(maps) == 1, "one ConfigMap of settings expected"
    return maps[0].obj.get("data") or {}


def module_of(argv: list[str]) -> str | None:
    """`python -m <module>` (possibly behind tini): the module, else None."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and i > 0 and Path(argv[i - 1]).name.startswith("python"):
            return argv[i + 1]
    return None


def container_argv(container: dict[str, Any]) -> list[str]:
    return [*container.get("command", []), *container.get("args", [])]


def literal_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def container_settings(docs: list[Doc], container: dict[str, Any]) -> Settings:
    """The settings this container's process builds: ConfigMap, then its own env."""
    env = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env |= configmap_data(docs)
    env |= literal_env(container)
    return Settings.from_env(env)


# --- what the code says each role consumes ---------------------------------------------------


@dataclass(frozen=True)
class Consumption:
    group: str
    topics: tuple[str, ...]


PARTITIONS = {spec.name: spec.partitions for spec in all_topics()}


def partitions_of(names: tuple[str, ...], namespace: str = "") -> int:
    base = [n.removeprefix(f"{namespace}.") if namespace else n for n in names]
    return min(PARTITIONS[n] for n in base)


def worker_source(module: str) -> Callable[[Settings], topics_module.TopicSpec]:
    """The third argument of `WorkerClients.build(settings, CONSUMER_GROUP, <source>)` in the
    role's app.py: a topic of schemas/topics.py, or `pool_topic(settings.pool)`."""
    app = REPO / module.replace(".", "/") / "app.py"
    for node in ast.walk(ast.parse(app.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "build"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "WorkerClients"
        ):
            source = node.args[2]
            if isinstance(source, ast.Name):
                spec = getattr(topics_module, source.id)
                return lambda settings: spec
            if isinstance(source, ast.Call) and ast.unparse(source.func) == "pool_topic":
                return lambda settings: topics_module.pool_topic(settings.pool)
            raise AssertionError(f"{app}: unexpected source {ast.unparse(source)}")
    raise AssertionError(f"{app}: no WorkerClients.build call")


def consumptions(module: str, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> list:
    """The consumer groups (and their topics) the role `module` joins, computed by the code."""
    # the pods' TURNSTREAM_HOME does not exist here: faust creates its data folder in it
    settings = dataclasses.replace(settings, state_dir=os.environ["TURNSTREAM_HOME"])
    if module in {
        "workers.inference",
        "workers.preprocess",
        "workers.tts",
        "workers.audit",
        "workers.tools",
    }:
        from workers.runtime import clients

        app = importlib.import_module(f"{module}.app")
        groups: list[str] = []
        monkeypatch.setattr(clients, "make_consumer", lambda s, g, c: groups.append(g))
        monkeypatch.setattr(clients, "make_producer", lambda s, c: None)
        built = clients.WorkerClients.build(
            settings, app.CONSUMER_GROUP, worker_source(module)(settings)
        )
        return [Consumption(groups[0], (built.input_topic,))]
    if module == "workers.sink":
        from workers.sink.app import ROUTES, route_group

        return [
            Consumption(
                route_group(settings.namespace, name),
                tuple(t.full_name(settings.namespace) for t in sources),
            )
            for name, (sources, _) in ROUTES.items()
        ]
    if module in {"stream_jobs.assembly", "stream_jobs.traces"}:
        return [faust_consumption(module, settings)]
    return []  # the edge, and the safety worker (a Redis list: `work_lists`): no group


def faust_consumption(module: str, settings: Settings) -> Consumption:
    """faust's consumer group is the app id; the topics are the job's agent source."""
    if module == "stream_jobs.assembly":
        from stream_jobs.assembly.app import AssemblyJob, create_app

        app = create_app(settings)
        job = AssemblyJob(app, settings, count_tokens=len, retriever=None)
    else:
        from stream_jobs.traces.app import TracesJob, create_app

        app = create_app(settings)
        job = TracesJob(app, settings)
    return Consumption(app.conf.id, tuple(job.source.topics))


# --- checks (each returns its problems) ------------------------------------------------------


def check_kubernetes_schemas(docs: list[Doc]) -> list[str]:
    problems = []
    for doc in docs:
        if doc.kind in {"ScaledObject", "Kustomization"}:
            continue
        try:
            kubernetes_validate.validate(doc.obj, K8S_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{doc.path.name}: no Kubernetes schema for {doc.kind}")
        except kubernetes_validate.ValidationError as err:
            path = ".".join(str(p) for p in err.path)
            problems.append(f"{doc.path.name} {doc.kind}/{doc.name}: {path}: {err.message}")
    return problems


# A minimal schema of the ScaledObject fields we use (KEDA's CRD is not bundled anywhere we
# can read offline): unknown fields fail, so a typo cannot slip through as "optional".
_STR_NUMBER = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}
_BEHAVIOR_RULES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "stabilizationWindowSeconds": {"type": "integer", "minimum": 0},
        "policies": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "value", "periodSeconds"],
                "properties": {
                    "type": {"enum": ["Pods", "Percent"]},
                    "value": {"type": "integer", "minimum": 1},
                    "periodSeconds": {"type": "integer", "minimum": 1},
                },
            },
        },
    },
}
SCALED_OBJECT_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "pattern": "^[a-z0-9-]+$"}},
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "minReplicaCount", "maxReplicaCount", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "kind": {"const": "Deployment"},
                        "apiVersion": {"const": "apps/v1"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "behavior": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "scaleUp": _BEHAVIOR_RULES,
                                        "scaleDown": _BEHAVIOR_RULES,
                                    },
                                }
                            },
                        }
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"enum": ["kafka", "redis", "prometheus", "cron"]},
                            "metadata": {"type": "object"},
                        },
                        "allOf": [
                            {
                                "if": {"properties": {"type": {"const": "kafka"}}},
                                "then": {
                                    "properties": {
                                        "metadata": {
                                            "additionalProperties": False,
                                            "required": [
                                                "bootstrapServers",
                                                "consumerGroup",
                                                "topic",
                                                "lagThreshold",
                                            ],
                                            "properties": {
                                                "bootstrapServers": {"type": "string"},
                                                "consumerGroup": {"type": "string"},
                                                "topic": {"type": "string"},
                                                "lagThreshold": _STR_NUMBER,
                                                "activationLagThreshold": _STR_NUMBER,
                                                "offsetResetPolicy": {
                                                    "enum": ["earliest", "latest"]
                                                },
                                                "allowIdleConsumers": {"const": "false"},
                                            },
                                        }
                                    }
                                },
                            },
                            {
                                "if": {"properties": {"type": {"const": "redis"}}},
                                "then": {
                                    "properties": {
                                        "metadata": {
                                            "additionalProperties": False,
                                            "required": ["address", "listName", "listLength"],
                                            "properties": {
                                                "address": {"type": "string"},
                                                "listName": {"type": "string"},
                                                "listLength": _STR_NUMBER,
                                                "activationListLength": _STR_NUMBER,
                                            },
                                        }
                                    }
                                },
                            },
                            {
                                "if": {"properties": {"type": {"const": "prometheus"}}},
                                "then": {
                                    "properties": {
                                        "metadata": {
                                            "additionalProperties": False,
                                            "required": ["serverAddress", "query", "threshold"],
                                            "properties": {
                                                "serverAddress": {
                                                    "type": "string",
                                                    "pattern": "^https?://",
                                                },
                                                "query": {"type": "string"},
                                                "threshold": _STR_NUMBER,
                                                "activationThreshold": _STR_NUMBER,
                                                "ignoreNullValues": {"enum": ["true", "false"]},
                                            },
                                        }
                                    }
                                },
                            },
                            {
                                "if": {"properties": {"type": {"const": "cron"}}},
                                "then": {
                                    "properties": {
                                        "metadata": {
                                            "additionalProperties": False,
                                            "required": [
                                                "timezone",
                                                "start",
                                                "end",
                                                "desiredReplicas",
                                            ],
                                            "properties": {
                                                "timezone": {"type": "string"},
                                                "start": {"type": "string"},
                                                "end": {"type": "string"},
                                                "desiredReplicas": _STR_NUMBER,
                                            },
                                        }
                                    }
                                },
                            },
                        ],
                    },
                },
            },
        },
    },
}


def check_scaled_object_schema(docs: list[Doc]) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCALED_OBJECT_SCHEMA)
    problems = []
    for doc in of_kind(docs, "ScaledObject"):
        for err in validator.iter_errors(doc.obj):
            path = ".".join(str(p) for p in err.absolute_path)
            problems.append(f"{doc.path.name} ScaledObject/{doc.name}: {path}: {err.message}")
    return problems


KUSTOMIZE_KEYS = {"apiVersion", "kind", "namespace", "labels", "resources", "images"}


def check_kustomization(path: Path = K8S / "kustomization.yaml") -> list[str]:
    k = yaml.safe_load(path.read_text())
    problems = []
    if k.get("apiVersion") != "kustomize.config.k8s.io/v1beta1" or k.get("kind") != "Kustomization":
        problems.append("not a kustomize.config.k8s.io/v1beta1 Kustomization")
    problems += [f"unexpected kustomization key {key}" for key in set(k) - KUSTOMIZE_KEYS]
    listed = k.get("resources", [])
    present = sorted(p.name for p in path.parent.glob("*.yaml") if p.name != path.name)
    problems += [f"{r} listed but missing" for r in listed if not (path.parent / r).is_file()]
    problems += [f"{p} not listed in resources" for p in present if p not in listed]
    images = {i["name"] for i in k.get("images", [])}
    used = {
        c["image"] for d in load_k8s() if d.kind in {"Deployment", "Job"} for c in containers(d)
    }
    problems += [f"image {i} has no kustomize images entry" for i in sorted(used - images)]
    return problems


def check_env_declared(docs: list[Doc]) -> list[str]:
    """Every variable a container gets is a declared setting (or one of the image's own)."""
    problems = [
        f"ConfigMap: {key} is not in runtime/settings.py"
        for key in configmap_data(docs)
        if key not in SETTINGS_ENV
    ]
    maps = {d.name for d in of_kind(docs, "ConfigMap")}
    for doc in workloads(docs):
        for c in containers(doc):
            for e in c.get("env", []):
                if e["name"] not in SETTINGS_ENV:
                    problems.append(f"{doc.name}: {e['name']} is not in runtime/settings.py")
            for source in c.get("envFrom", []):
                ref = source.get("configMapRef", {}).get("name")
                if ref is not None and ref not in maps:
                    problems.append(f"{doc.name}: envFrom names unknown ConfigMap {ref}")
                if "secretRef" in source:
                    problems.append(f"{doc.name}: envFrom a whole Secret (use secretKeyRef)")
    return problems


def check_settings_parse(docs: list[Doc]) -> list[str]:
    """The values are valid for their types, and the pools are configured ones."""
    problems = []
    for doc in workloads(docs):
        for c in containers(doc):
            try:
                settings = container_settings(docs, c)
            except SettingsError as err:
                problems.append(f"{doc.name}: {err}")
                continue
            if settings.pool not in settings.pool_names:
                problems.append(f"{doc.name}: pool {settings.pool!r} not in TURNSTREAM_POOLS")
    return problems


def check_modules(docs: list[Doc]) -> list[str]:
    problems = []
    for doc in workloads(docs):
        for c in containers(doc):
            module = module_of(container_argv(c))
            if module is None:
                problems.append(f"{doc.name}: does not run `python -m <module>`")
            elif not runs_as_main(module):
                problems.append(f"{doc.name}: module {module} does not exist or has no main")
    deployed = {
        module_of(container_argv(c)) for d in of_kind(docs, "Deployment") for c in containers(d)
    }
    problems += [
        f"role {r.module} ({r.name}) has no Deployment" for r in ROLES if r.module not in deployed
    ]
    jobs = {module_of(container_argv(c)) for d in of_kind(docs, "Job") for c in containers(d)}
    problems += [f"no Job runs {m}" for m in sorted(ONE_SHOT_MODULES - jobs)]
    return problems


def runs_as_main(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    if spec is None:
        return False
    if spec.submodule_search_locations:  # a package: needs __main__.py
        return importlib.util.find_spec(f"{module}.__main__") is not None
    return "__main__" in Path(spec.origin or "").read_text()


def check_scaling(docs: list[Doc], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Consumer counts never exceed partitions; triggers name the code's groups and topics."""
    problems, scaled_targets = check_scaled_objects(docs, monkeypatch)
    hpas = hpa_targets(docs)
    for doc in of_kind(docs, "Deployment"):
        autoscaled = doc.name in scaled_targets or doc.name in hpas
        replicas = doc.obj["spec"].get("replicas")
        if autoscaled and replicas is not None:
            problems.append(f"{doc.name}: sets replicas although an autoscaler owns them")
        if autoscaled:
            continue
        container = containers(doc)[0]
        settings = container_settings(docs, container)
        groups = consumptions(module_of(container_argv(container)) or "", settings, monkeypatch)
        for group in groups:
            if (replicas or 1) > partitions_of(group.topics, settings.namespace):
                problems.append(f"{doc.name}: {replicas} replicas > partitions of {group.group}")
        if groups and not partition_comment_near(doc, "replicas"):
            problems.append(f"{doc.name}: no partition-rule comment by replicas")
    both = scaled_targets & hpas
    problems += [f"{name}: both an HPA and a ScaledObject" for name in sorted(both)]
    return problems


def check_scaled_objects(
    docs: list[Doc], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], set[str]]:
    """Each ScaledObject's kafka triggers against the groups its target joins; the sum of
    maxReplicaCount over the ScaledObjects of one group against its partitions."""
    problems = []
    deployments = {d.name: d for d in of_kind(docs, "Deployment")}
    bootstrap = configmap_data(docs).get("TURNSTREAM_KAFKA_BOOTSTRAP")
    targets: set[str] = set()
    max_by_group: dict[str, int] = {}
    group_partitions: dict[str, int] = {}
    for so in of_kind(docs, "ScaledObject"):
        spec = so.obj["spec"]
        target = deployments.get(spec["scaleTargetRef"]["name"])
        if target is None:
            problems.append(f"ScaledObject/{so.name}: no Deployment {spec['scaleTargetRef']}")
            continue
        targets.add(target.name)
        if spec["minReplicaCount"] > spec["maxReplicaCount"]:
            problems.append(f"ScaledObject/{so.name}: minReplicaCount > maxReplicaCount")
        if not partition_comment_near(so, "maxReplicaCount"):
            problems.append(f"ScaledObject/{so.name}: no partition-rule comment by maxReplicaCount")
        container = containers(target)[0]
        settings = container_settings(docs, container)
        module = module_of(container_argv(container)) or ""
        consumed = {c.group: c for c in consumptions(module, settings, monkeypatch)}
        kafka = [t["metadata"] for t in spec["triggers"] if t["type"] == "kafka"]
        lists = [t["metadata"] for t in spec["triggers"] if t["type"] == "redis"]
        if not kafka and not lists:
            problems.append(f"ScaledObject/{so.name}: no kafka lag or redis list trigger")
        for meta in lists:
            if meta["listName"] not in work_lists(module, settings):
                problems.append(f"ScaledObject/{so.name}: {module} pops no {meta['listName']}")
            if meta["address"] != redis_address(docs):
                problems.append(f"ScaledObject/{so.name}: address != the ConfigMap's Redis")
            cap = inflight_cap(module, settings)
            if cap is not None and float(meta["listLength"]) > cap:
                problems.append(
                    f"ScaledObject/{so.name}: listLength {meta['listLength']} > the {cap} "
                    "items a replica holds at once"
                )
        for meta in kafka:
            group = consumed.get(meta["consumerGroup"])
            if group is None:
                problems.append(
                    f"ScaledObject/{so.name}: group {meta['consumerGroup']!r} is not the one "
                    f"{module} joins ({sorted(consumed)})"
                )
                continue
            if meta["topic"] not in group.topics:
                problems.append(f"ScaledObject/{so.name}: {module} does not read {meta['topic']}")
            if meta["bootstrapServers"] != bootstrap:
                problems.append(f"ScaledObject/{so.name}: bootstrapServers != the ConfigMap's")
            cap = inflight_cap(module, settings)
            if cap is not None and float(meta["lagThreshold"]) > cap:
                problems.append(
                    f"ScaledObject/{so.name}: lagThreshold {meta['lagThreshold']} > the "
                    f"{cap} turns a replica holds (in-flight turns count as lag)"
                )
            group_partitions[group.group] = partitions_of(group.topics, settings.namespace)
            max_by_group[group.group] = max_by_group.get(group.group, 0) + spec["maxReplicaCount"]
    for group, total in max_by_group.items():
        if total > group_partitions[group]:
            problems.append(
                f"group {group}: up to {total} consumers but {group_partitions[group]} partitions"
            )
    return problems, targets


def hpa_targets(docs: list[Doc]) -> set[str]:
    return {
        h.obj["spec"]["scaleTargetRef"]["name"] for h in of_kind(docs, "HorizontalPodAutoscaler")
    }


def inflight_cap(module: str, settings: Settings) -> int | None:
    """Turns one replica holds at once (uncommitted, so counted in its lag)."""
    return {
        "workers.inference": turns_held(settings),
        "workers.preprocess": settings.max_preprocess_inflight,
        "workers.tts": 8 * settings.tts_concurrency,
        "workers.safety": SAFETY_INFLIGHT,
    }.get(module)


def work_lists(module: str, settings: Settings) -> list[str]:
    """The Redis lists a role pops its work from (`workers/runtime/work_list.py`)."""
    names = RedisNames.for_namespace(settings.namespace)
    return {"workers.safety": [names.safety_windows_key()]}.get(module, [])


def redis_address(docs: list[Doc]) -> str:
    """host:port of the ConfigMap's Redis URL (what KEDA's redis scaler takes)."""
    return urlsplit(configmap_data(docs).get("TURNSTREAM_REDIS_URL", "")).netloc


def partition_comment_near(doc: Doc, key: str) -> bool:
    """The partition rule is written in a comment on or just above `key:` in the object."""
    lines = doc.path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == f"name: {doc.name}"]
    for start in starts:
        for i in range(start, len(lines)):
            if lines[i].strip() == "---":
                break
            if re.match(rf"^\s*{key}:", lines[i]):
                window = " ".join(lines[max(start, i - 3) : i + 1]).lower()
                if "#" in window and "partition" in window:
                    return True
                break
    return False


def check_scale_to_zero(docs: list[Doc]) -> list[str]:
    """The reasoning pool and TTS scale to zero; a non-default pool at zero needs a wake
    signal besides its own lag: the router hands its turns to the default pool while it
    has no live worker (stream_jobs/assembly/routing/route.py), so it would never get lag."""
    problems = []
    objects = {so.obj["spec"]["scaleTargetRef"]["name"]: so for so in of_kind(docs, "ScaledObject")}
    for name in ("inference-reasoning", "tts"):
        so = objects.get(name)
        if so is None or so.obj["spec"]["minReplicaCount"] != 0:
            problems.append(f"{name}: should scale to zero (minReplicaCount: 0)")
    deployments = {d.name: d for d in of_kind(docs, "Deployment")}
    for name, so in objects.items():
        container = containers(deployments[name])[0]
        if module_of(container_argv(container)) != "workers.inference":
            continue
        settings = container_settings(docs, container)
        at_zero = so.obj["spec"]["minReplicaCount"] == 0
        wakes = any(t["type"] == "cron" for t in so.obj["spec"]["triggers"])
        if at_zero and settings.pool != settings.pool_names[0] and not wakes:
            problems.append(f"{name}: pool {settings.pool} at zero has no wake signal (cron)")
    return problems


def check_secrets(docs: list[Doc]) -> list[str]:
    problems = [
        f"{d.path.name}: a Secret object is stored in the repo" for d in of_kind(docs, "Secret")
    ]
    data = configmap_data(docs)
    problems += [f"ConfigMap carries {k}" for k in SECRET_ENV if k in data]
    for doc in workloads(docs):
        for c in containers(doc):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if e["name"] in SECRET_ENV:
                    if ref is None:
                        problems.append(f"{doc.name}: {e['name']} has a literal value")
                    elif ref.get("name") != SECRET_NAME or ref.get("key") != SECRET_ENV[e["name"]]:
                        problems.append(f"{doc.name}: {e['name']} from the wrong secret key")
                elif ref is not None:
                    problems.append(
                        f"{doc.name}: {e['name']} from a Secret is not a secret setting"
                    )
    return problems


def check_exposure(docs: list[Doc]) -> list[str]:
    """Each Deployment's process would start: what it binds off loopback authenticates
    (`runtime.exposure`), its secrets standing in as random values of a proper length."""
    problems = []
    for doc in of_kind(docs, "Deployment"):
        for c in containers(doc):
            secrets = {
                e["name"]: secrets_module.token_hex(32)
                for e in c.get("env", [])
                if "secretKeyRef" in e.get("valueFrom", {})
            }
            settings = dataclasses.replace(
                container_settings(docs, c),
                **{
                    f.name: secrets[f.metadata["env"]]
                    for f in dataclasses.fields(Settings)
                    if f.metadata["env"] in secrets
                },
            )
            edge = module_of(container_argv(c)) == "ws_edge"
            problems += [f"{doc.name}: {p}" for p in exposure_problems(settings, edge=edge)]
    return problems


def check_network_policy(docs: list[Doc]) -> list[str]:
    """Ingress is denied by default; the ports let in are the edge's (its two doors) and
    the metrics' as the settings say, the edge's for edge pods only."""
    policies = {d.name: d.obj["spec"] for d in of_kind(docs, "NetworkPolicy")}
    settings = Settings.from_env(configmap_data(docs))
    problems = []
    deny = policies.get("default-deny-ingress", {})
    if deny.get("podSelector") != {} or deny.get("ingress"):
        problems.append("no default-deny-ingress policy for every pod")
    edge_ports = {settings.edge_port, settings.edge_http_port}  # the WebSocket and HTTP doors
    for name, port, selector in (
        ("edge-clients", edge_ports, {"matchLabels": {"app.kubernetes.io/name": "edge"}}),
        ("metrics-scrape", {settings.metrics_port}, {}),
    ):
        spec = policies.get(name)
        if spec is None:
            problems.append(f"no {name} policy")
            continue
        ports = {p["port"] for rule in spec.get("ingress", []) for p in rule.get("ports", [])}
        if ports != port:
            problems.append(f"{name} lets in {sorted(ports)}, the settings say {sorted(port)}")
        if spec.get("podSelector") != selector:
            problems.append(f"{name} selects {spec.get('podSelector')}")
    return problems


def check_no_secret_values_in_files(paths: list[Path]) -> list[str]:
    """No deployment file holds a credential: not the dev HMAC secret, no user:password@ in
    a URL unless the password is a ${...} interpolation, no assigned secret value."""
    problems = []
    for path in paths:
        text = path.read_text()
        if DEV_SECRET in text:
            problems.append(f"{path.name}: contains the local-only dev secret")
        for match in re.finditer(r"://[^/\s:@]+:([^@\s]+)@", text):
            if not match.group(1).startswith("${"):
                problems.append(f"{path.name}: a URL with an inline password")
        for match in re.finditer(
            r"^[ \t]*(TURNSTREAM_AUTH_SECRET|CLICKHOUSE_PASSWORD)[ \t]*[=:][ \t]*(\S*)", text, re.M
        ):
            value = match.group(2)
            if value and not value.startswith("${"):
                problems.append(f"{path.name}: {match.group(1)} has a value")
    return problems


def check_probes(docs: list[Doc]) -> list[str]:
    """Edge: HTTP on a file it serves; inference: the state board; other consumers: Kafka."""
    from ws_edge.web_assets import ASSETS

    problems = []
    for doc in of_kind(docs, "Deployment"):
        c = containers(doc)[0]
        module = module_of(container_argv(c))
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
        if module == "ws_edge":
            settings = container_settings(docs, c)
            if settings.edge_host in {"127.0.0.1", "localhost"}:
                problems.append(f"{doc.name}: the edge binds {settings.edge_host} (unreachable)")
            if settings.edge_port not in ports.values():
                problems.append(f"{doc.name}: containerPort != TURNSTREAM_EDGE_PORT")
            for kind in ("readinessProbe", "livenessProbe"):
                get = c.get(kind, {}).get("httpGet")
                if get is None or get["path"] not in ASSETS:
                    problems.append(f"{doc.name}: {kind} must GET a file the edge serves")
                elif ports.get(get["port"], get["port"]) != settings.edge_port:
                    problems.append(f"{doc.name}: {kind} probes another port")
            continue
        wanted = {"startupProbe": STARTED_CHECK.get(module, "kafka")}
        wanted["readinessProbe"] = wanted["startupProbe"]
        if module == "workers.inference":
            wanted["livenessProbe"] = "board"
        for kind, check in wanted.items():
            command = c.get(kind, {}).get("exec", {}).get("command", [])
            if command[:3] != ["python", PROBE_IN_IMAGE, check]:
                problems.append(f"{doc.name}: {kind} should run probe.py {check}")
        live = c.get("livenessProbe", {}).get("exec", {}).get("command", [])
        if module == "workers.inference" and "--liveness" not in live:
            problems.append(f"{doc.name}: the liveness probe must not fail on a Redis outage")
    return problems


# What says "started" for a role that is not a Kafka consumer: the inference workers' state
# board; the safety worker's connection to Redis (it has no Kafka client).
STARTED_CHECK = {"workers.inference": "board", "workers.safety": "redis"}


def drain_budget_s() -> float:
    """Worst case from SIGTERM to exit of a worker, from the code: the drain of in-flight
    turns, the relay flush, the producer's last request (workers/runtime)."""
    from workers.runtime.running import RELAY_FLUSH_S, RunningService

    drain = RunningService.__dataclass_fields__["drain_s"].default
    flush = RELAY_FLUSH_S
    request_s = Settings.from_env({}).kafka_request_timeout_s  # the producer's, by default
    return drain + flush + request_s


def prestop_sleep_s(container: dict[str, Any]) -> float:
    command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    return float(command[1]) if command[:1] == ["sleep"] else 0.0


def check_grace(docs: list[Doc]) -> list[str]:
    problems = []
    budget = drain_budget_s()
    for doc in of_kind(docs, "Deployment"):
        c = containers(doc)[0]
        grace = pod_spec(doc).get("terminationGracePeriodSeconds", 30)
        need = budget + prestop_sleep_s(c)
        if module_of(container_argv(c)) == "workers.inference":
            need += 30  # the engine's own shutdown after the drain
        if grace < need:
            problems.append(f"{doc.name}: terminationGracePeriodSeconds {grace} < {need:.0f}")
    return problems


def check_gpu(docs: list[Doc]) -> list[str]:
    problems = []
    for doc in of_kind(docs, "Deployment"):
        c = containers(doc)[0]
        limits = c.get("resources", {}).get("limits", {})
        spec = pod_spec(doc)
        if module_of(container_argv(c)) == "workers.inference":
            if int(limits.get("nvidia.com/gpu", 0)) != 1:
                problems.append(f"{doc.name}: needs nvidia.com/gpu: 1 in limits")
            if not any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])):
                problems.append(f"{doc.name}: no toleration for GPU nodes")
            if not spec.get("nodeSelector"):
                problems.append(f"{doc.name}: no node selector for GPU nodes")
        elif "nvidia.com/gpu" in limits:
            problems.append(f"{doc.name}: a GPU for a CPU role")
        if not c.get("resources", {}).get("requests") or not limits:
            problems.append(f"{doc.name}: resource requests and limits are required")
    return problems


def check_disruption_budgets(docs: list[Doc]) -> list[str]:
    problems = []
    deployments = {
        d.name: d.obj["spec"]["selector"]["matchLabels"] for d in of_kind(docs, "Deployment")
    }
    covered = set()
    for pdb in of_kind(docs, "PodDisruptionBudget"):
        selector = pdb.obj["spec"]["selector"]["matchLabels"]
        hits = [n for n, labels in deployments.items() if labels == selector]
        if not hits:
            problems.append(f"PodDisruptionBudget/{pdb.name} selects no Deployment")
        covered.update(hits)
    problems += [f"{name}: no PodDisruptionBudget" for name in sorted(set(deployments) - covered)]
    return problems


# --- compose ----------------------------------------------------------------------------------


def role_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services built from our Dockerfile (the others are Kafka, Redis, ClickHouse)."""
    return {n: s for n, s in compose["services"].items() if "build" in s}


def env_example() -> dict[str, str]:
    pairs = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def check_compose(compose: dict[str, Any], k8s_docs: list[Doc]) -> list[str]:
    problems = []
    services = compose["services"]
    roles = role_services(compose)
    example = env_example()
    for name, svc in roles.items():
        env = svc.get("environment", {})
        problems += [
            f"compose {name}: {k} is not in runtime/settings.py"
            for k in env
            if k not in SETTINGS_ENV
        ]
        module = module_of(svc.get("command", []))
        if module is None or not runs_as_main(module):
            problems.append(f"compose {name}: runs no existing module")
        if svc.get("restart") != "no" and "healthcheck" not in svc:
            problems.append(f"compose {name}: no healthcheck")
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            if dep not in services:
                problems.append(f"compose {name}: depends on unknown service {dep}")
            elif cond["condition"] == "service_healthy" and "healthcheck" not in services[dep]:
                problems.append(f"compose {name}: waits for {dep} to be healthy; it has no check")
            elif (
                cond["condition"] == "service_completed_successfully"
                and services[dep].get("restart") != "no"
            ):
                problems.append(f"compose {name}: waits for {dep} to complete; it restarts")
    compose_modules = {module_of(s.get("command", [])) for s in roles.values()}
    k8s_modules = {module_of(container_argv(c)) for d in workloads(k8s_docs) for c in containers(d)}
    if compose_modules != k8s_modules:
        problems.append(
            f"compose and Kubernetes run different modules: only compose "
            f"{sorted(compose_modules - k8s_modules)}, only Kubernetes "
            f"{sorted(k8s_modules - compose_modules)}"
        )
    text = "\n".join(_strings(compose))
    for var, default in re.findall(r"\$\{([A-Z0-9_]+)(:[-?][^}]*)?\}", text):
        if var not in example:
            problems.append(f"compose interpolates {var}, which .env.example does not declare")
        if (var in SECRET_ENV or var == "CLICKHOUSE_PASSWORD") and not default.startswith(":?"):
            problems.append(f"compose: secret {var} must be required (${{{var}:?...}})")
    for key, value in example.items():
        if key not in SETTINGS_ENV and key not in COMPOSE_ONLY_VARS:
            problems.append(f".env.example: {key} is neither a setting nor a compose variable")
        if (key in SECRET_ENV or key == "CLICKHOUSE_PASSWORD") and value:
            problems.append(f".env.example: {key} has a value")
    kafka_version = (REPO / "infra/kafka/VERSION").read_text().strip()
    if services["kafka"]["image"] != f"apache/kafka:{kafka_version}":
        problems.append(f"compose kafka is not apache/kafka:{kafka_version} (infra/kafka/VERSION)")
    return problems


def _strings(node: Any) -> list[str]:
    """Every string (keys and values) in a parsed YAML tree."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return []


def duration_s(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)(ms|s|m|h)", text))


def check_compose_grace(compose: dict[str, Any]) -> list[str]:
    problems = []
    budget = drain_budget_s()
    for name, svc in role_services(compose).items():
        module = module_of(svc.get("command", []))
        if module in ONE_SHOT_MODULES:
            continue
        need = budget + (30 if module == "workers.inference" else 0)
        if duration_s(svc.get("stop_grace_period", "10s")) < need:
            problems.append(f"compose {name}: stop_grace_period < {need:.0f} s (cuts the drain)")
    return problems


def check_dockerfile(text: str) -> list[str]:
    problems = []
    if not re.search(r"^FROM python:3\.11-slim\b", text, re.M):
        problems.append("Dockerfile: not FROM python:3.11-slim")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    match = re.search(r'^ARG EXTRAS="([^"]+)"', text, re.M)
    wanted = set(match.group(1).split(",")) if match else set()
    problems += [f"Dockerfile: unknown extra {e}" for e in sorted(wanted - extras)]
    setup = (REPO / "infra/setup.sh").read_text()
    installed = set(re.search(r'-e "\.\[([^\]]+)\]"', setup).group(1).split(","))
    missing = installed - wanted - {"dev", "bench"}
    problems += [
        f"Dockerfile: setup.sh installs extra {e}, the image does not" for e in sorted(missing)
    ]
    for step, why in (
        (r"python -m moderation\.categories\.train", "the category heads are not trained"),
        (r"nudenet==", "the image detector's weights are not installed"),
        (r"pipecat-ai==", "the voice loop's audio turn model is not installed"),
    ):
        if not re.search(step, text):
            problems.append(f"Dockerfile: {why} (infra/setup.sh does it)")
    if not re.search(r"pip install .*-e \"\.\[", text):
        problems.append("Dockerfile: the package is not pip install -e'd")
    for block in re.findall(r"^ENV ((?:.*\\\n)*.*)$", text, re.M):
        for key in re.findall(r"([A-Z_][A-Z0-9_]*)=", block):
            if key not in SETTINGS_ENV and key not in IMAGE_ENV:
                problems.append(f"Dockerfile: ENV {key} is neither a setting nor allowed")
    if "WORKDIR /app" not in text or "COPY infra/ infra/" not in text:
        problems.append(f"Dockerfile: the probes expect the repo's infra/ at {PROBE_IN_IMAGE}")
    return problems


# --- the tests ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return load_k8s()


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    """faust apps create their data folder under TURNSTREAM_HOME: keep it in tmp."""
    monkeypatch.setenv("TURNSTREAM_HOME", str(tmp_path))


def test_every_yaml_file_parses():
    files = [*K8S.glob("*.yaml"), COMPOSE_FILE]
    assert len(files) > 10
    for path in files:
        assert list(yaml.safe_load_all(path.read_text())), path


def test_the_manifests_hold_every_kind_the_deployment_needs(docs):
    kinds = {d.kind for d in docs}
    assert {
        "Namespace",
        "ConfigMap",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ScaledObject",
        "Job",
        "NetworkPolicy",
    } <= kinds
    names = {d.name for d in of_kind(docs, "Deployment")}
    assert {"inference-chat", "inference-reasoning", "inference-chat-warm", "edge"} <= names


def test_core_objects_validate_against_the_kubernetes_schemas(docs):
    assert check_kubernetes_schemas(docs) == []


def test_scaled_objects_validate_against_the_minimal_keda_schema(docs):
    assert of_kind(docs, "ScaledObject")
    assert check_scaled_object_schema(docs) == []


def test_kustomization_lists_every_manifest():
    assert check_kustomization() == []


def test_every_env_var_is_a_declared_setting(docs):
    assert check_env_declared(docs) == []


def test_settings_values_parse_and_pools_exist(docs):
    assert check_settings_parse(docs) == []


def test_every_command_runs_an_existing_module(docs):
    assert check_modules(docs) == []


def test_autoscaling_fits_the_partitions_and_the_code_s_groups(docs, monkeypatch):
    assert check_scaling(docs, monkeypatch) == []


def test_scale_to_zero_roles_can_wake(docs):
    assert check_scale_to_zero(docs) == []


def test_secrets_are_referenced_never_stored(docs):
    files = [*K8S.glob("*.yaml"), COMPOSE_FILE, ENV_EXAMPLE, DOCKERFILE]
    assert check_secrets(docs) == []
    assert check_no_secret_values_in_files(files) == []
    assert check_exposure(docs) == []
    assert check_network_policy(docs) == []


def test_the_compose_env_file_is_not_tracked():
    """A filled-in infra/compose/.env holds the secrets: it must never be in git."""
    listed = subprocess.run(
        ["git", "ls-files", "--", "infra/compose/.env"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.stdout.strip() == ""


def test_probes_check_what_each_role_offers(docs):
    assert check_probes(docs) == []


def test_grace_periods_cover_the_drain(docs, compose):
    assert drain_budget_s() >= 10
    assert check_grace(docs) == []
    assert check_compose_grace(compose) == []


def test_gpu_scheduling_and_resources(docs):
    assert check_gpu(docs) == []


def test_every_deployment_has_a_disruption_budget(docs):
    assert check_disruption_budgets(docs) == []


def test_compose_matches_the_code_and_kubernetes(compose, docs):
    assert check_compose(compose, docs) == []


def test_dockerfile_installs_the_roles_extras():
    assert check_dockerfile(DOCKERFILE.read_text()) == []


def test_registry_topics_are_the_ones_partition_checks_use():
    assert {spec.name for spec in REGISTRY} <= set(PARTITIONS)
    assert Path(DEV_TENANT_REGISTRY).is_file()  # the default the docs tell users to replace


# --- the checks catch what they are for -----------------------------------------------------


def _broken(docs: list[Doc], kind: str, name: str, edit: Callable[[dict], None]) -> list[Doc]:
    out = []
    for doc in docs:
        obj = copy.deepcopy(doc.obj)
        if doc.kind == kind and doc.name == name:
            edit(obj)
        out.append(Doc(doc.path, obj))
    return out


def _env(obj: dict) -> list[dict]:
    return obj["spec"]["template"]["spec"]["containers"][0].setdefault("env", [])


def _env_var(obj: dict, name: str) -> dict:
    return next(e for e in _env(obj) if e["name"] == name)


def test_checks_catch_schema_errors(docs):
    bad = _broken(docs, "Deployment", "edge", lambda o: o["spec"].update(replica=2))
    assert check_kubernetes_schemas(bad)
    bad = _broken(docs, "ScaledObject", "tts", lambda o: o["spec"].update(maxReplicas=3))
    assert check_scaled_object_schema(bad)
    bad = _broken(
        docs, "ScaledObject", "tts", lambda o: o["spec"]["triggers"][0]["metadata"].pop("topic")
    )
    assert check_scaled_object_schema(bad)


def test_checks_catch_undeclared_or_invalid_settings(docs):
    bad = _broken(
        docs,
        "Deployment",
        "tts",
        lambda o: _env(o).append({"name": "TURNSTREAM_TTS_SPEED", "value": "2"}),
    )
    assert any("TURNSTREAM_TTS_SPEED" in p for p in check_env_declared(bad))
    bad = _broken(
        docs,
        "Deployment",
        "tts",
        lambda o: _env(o).append({"name": "TURNSTREAM_TTS_CONCURRENCY", "value": "two"}),
    )
    assert check_settings_parse(bad)
    bad = _broken(
        docs,
        "Deployment",
        "inference-reasoning",
        lambda o: _env_var(o, "TURNSTREAM_POOL").update(value="vision"),
    )
    assert any("vision" in p for p in check_settings_parse(bad))


def test_checks_catch_too_many_consumers(docs, monkeypatch):
    bad = _broken(docs, "ScaledObject", "preprocess", lambda o: o["spec"].update(maxReplicaCount=9))
    assert any("partitions" in p for p in check_scaling(bad, monkeypatch))
    # the warm pool shares its group with inference-chat: their sum counts
    bad = _broken(
        docs, "ScaledObject", "inference-chat-warm", lambda o: o["spec"].update(maxReplicaCount=3)
    )
    assert any("inference.chat.inference" in p for p in check_scaling(bad, monkeypatch))
    bad = _broken(docs, "Deployment", "sink", lambda o: o["spec"].update(replicas=4))
    assert any("sink" in p for p in check_scaling(bad, monkeypatch))


def test_checks_catch_wrong_groups_topics_and_thresholds(docs, monkeypatch):
    def wrong_group(o):
        o["spec"]["triggers"][0]["metadata"]["consumerGroup"] = "tts"

    assert any(
        "tts" in p
        for p in check_scaling(_broken(docs, "ScaledObject", "tts", wrong_group), monkeypatch)
    )

    def wrong_topic(o):
        o["spec"]["triggers"][0]["metadata"]["topic"] = "inference.chat"

    bad = _broken(docs, "ScaledObject", "inference-reasoning", wrong_topic)
    assert any("does not read" in p for p in check_scaling(bad, monkeypatch))

    def high_lag(o):
        o["spec"]["triggers"][0]["metadata"]["lagThreshold"] = "100"

    bad = _broken(docs, "ScaledObject", "inference-chat", high_lag)
    assert any("lagThreshold" in p for p in check_scaling(bad, monkeypatch))


def test_checks_catch_missing_modules_and_roles(docs, compose):
    def typo(o):
        o["spec"]["template"]["spec"]["containers"][0]["args"][-1] = "workers.preproces"

    assert any(
        "preproces" in p for p in check_modules(_broken(docs, "Deployment", "preprocess", typo))
    )
    without_traces = [d for d in docs if d.name != "traces" or d.kind != "Deployment"]
    assert any("stream_jobs.traces" in p for p in check_modules(without_traces))
    bad = copy.deepcopy(compose)
    bad["services"]["tts"]["command"] = ["python", "-m", "workers.speech"]
    assert any("tts" in p for p in check_compose(bad, docs))


def test_checks_catch_a_missing_partition_rule_comment(docs, tmp_path):
    so = next(d for d in docs if d.kind == "ScaledObject" and d.name == "tts")
    assert partition_comment_near(so, "maxReplicaCount")
    bare = tmp_path / "tts.yaml"
    bare.write_text(
        "\n".join(
            line
            for line in so.path.read_text().splitlines()
            if "Partition rule" not in line and "group can't use" not in line
        )
    )
    assert not partition_comment_near(Doc(bare, so.obj), "maxReplicaCount")


def test_checks_catch_secret_values(docs, tmp_path):
    def literal(o):
        _env_var(o, "TURNSTREAM_AUTH_SECRET").update(value="hunter2")
        del _env_var(o, "TURNSTREAM_AUTH_SECRET")["valueFrom"]

    assert check_secrets(_broken(docs, "Deployment", "edge", literal))
    leaked = tmp_path / "leak.yaml"
    leaked.write_text(f"url: http://turnstream:s3cret@clickhouse:8123/db\nsecret: {DEV_SECRET}\n")
    assert len(check_no_secret_values_in_files([leaked])) == 2
    env_file = tmp_path / ".env"
    env_file.write_text("TURNSTREAM_AUTH_SECRET=abc\n")
    assert check_no_secret_values_in_files([env_file])

    def without_metrics_token(o):
        o["spec"]["template"]["spec"]["containers"][0]["env"] = [
            e for e in _env(o) if e["name"] != "TURNSTREAM_METRICS_TOKEN"
        ]

    open_metrics = check_exposure(_broken(docs, "Deployment", "sink", without_metrics_token))
    assert open_metrics and "TURNSTREAM_METRICS_TOKEN" in open_metrics[0]
    wide = _broken(
        docs,
        "NetworkPolicy",
        "edge-clients",
        lambda o: o["spec"].update(podSelector={}),
    )
    assert check_network_policy(wide) == ["edge-clients selects {}"]
    no_secret = _broken(docs, "Deployment", "edge", lambda o: _env(o).clear())
    assert any("dev secret" in p or "default" in p for p in check_exposure(no_secret))


def test_checks_catch_short_grace_and_missing_budgets(docs, compose):
    bad = _broken(
        docs,
        "Deployment",
        "inference-chat",
        lambda o: o["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=30),
    )
    assert check_grace(bad)
    broken = copy.deepcopy(compose)
    broken["services"]["preprocess"]["stop_grace_period"] = "10s"
    assert check_compose_grace(broken)
    no_pdb = [d for d in docs if not (d.kind == "PodDisruptionBudget" and d.name == "safety")]
    assert check_disruption_budgets(no_pdb)


def test_checks_catch_probe_gpu_and_wake_mistakes(docs):
    def local_edge(o):
        _env(o).append({"name": "TURNSTREAM_EDGE_HOST", "value": "127.0.0.1"})

    assert check_probes(_broken(docs, "Deployment", "edge", local_edge))

    def no_gpu(o):
        o["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu")

    assert check_gpu(_broken(docs, "Deployment", "inference-reasoning", no_gpu))

    def no_cron(o):
        o["spec"]["triggers"] = [t for t in o["spec"]["triggers"] if t["type"] != "cron"]

    assert check_scale_to_zero(_broken(docs, "ScaledObject", "inference-reasoning", no_cron))


def test_checks_catch_compose_and_dockerfile_drift(compose, docs):
    bad = copy.deepcopy(compose)
    bad["services"]["edge"]["environment"]["TURNSTREAM_AUTH_SECRET"] = (
        "${TURNSTREAM_AUTH_SECRET:-x}"
    )
    bad["services"]["safety"]["environment"] = {"TURNSTREAM_SAFETY_LEVEL": "high"}
    problems = check_compose(bad, docs)
    assert any("TURNSTREAM_SAFETY_LEVEL" in p for p in problems)
    assert any("must be required" in p for p in problems)
    text = DOCKERFILE.read_text().replace(",tts,", ",")
    assert any("tts" in p for p in check_dockerfile(text))
    assert check_dockerfile(text.replace("FROM python:3.11-slim", "FROM python:3.12-slim"))
    untrained = DOCKERFILE.read_text().replace("moderation.categories.train", "x")
    assert any("category heads" in p for p in check_dockerfile(untrained))
    undetected = DOCKERFILE.read_text().replace("nudenet==", "x==")
    assert any("image detector" in p for p in check_dockerfile(undetected))


# --- the probe script --------------------------------------------------------------------------


def _probe():
    spec = importlib.util.spec_from_file_location("turnstream_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TCP_TABLE = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1
   1: 0A00000A:D2F0 0A000063:2384 01 00000000:00000000 00:00000000 00000000  1000        0 2 1
   2: 0A00000A:D2F2 0A000064:18EB 06 00000000:00000000 00:00000000 00000000  1000        0 3 1
"""


def test_probe_kafka_reads_established_connections():
    probe = _probe()
    assert probe.bootstrap_ports("kafka-0:9092, kafka-1:9093,bad") == {9092, 9093}
    assert probe.established_remote_ports(TCP_TABLE) == {0x2384}  # 9092; 6379 is TIME_WAIT
    assert probe.kafka_connected("kafka:9092", [TCP_TABLE])[0]
    assert not probe.kafka_connected("redis:6379", [TCP_TABLE])[0]
    assert not probe.kafka_connected("kafka", [TCP_TABLE])[0]


def test_probe_redis_reads_the_url_s_port():
    probe = _probe()
    assert probe.redis_port("redis://redis:6380/0") == {6380}
    assert probe.redis_port("redis://:secret@redis") == {6379}
    assert probe.redis_port("rediss://user:pw@cache.example:16379") == {16379}
    table = TCP_TABLE.replace("0A000063:2384", "0A000063:18EB")  # established to 6379
    assert probe.redis_connected("redis://redis:6379/0", [table])[0]
    assert not probe.redis_connected("redis://redis:6379/0", [TCP_TABLE])[0]  # TIME_WAIT only


def test_the_safety_worker_has_no_kafka_client_to_probe():
    """Its probe checks Redis because it never opens a Kafka connection: were a Kafka client
    added back, the `kafka` check would say more and this map should change."""
    source = "\n".join(p.read_text() for p in (REPO / "workers" / "safety").glob("*.py"))
    assert "aiokafka" not in source and "make_consumer" not in source
    assert "make_producer" not in source


def test_probe_board_finds_this_pod_s_fresh_entry():
    from schemas.worker_state import WorkerState, encode_state

    probe = _probe()

    def entry(worker_id: str, at_ms: float, partitions: list[int]) -> bytes:
        return encode_state(WorkerState(worker_id, "chat", at_ms, partitions, capacity=64))

    board = {
        b"inference-pod-a-1-aaaaaa": entry("inference-pod-a-1-aaaaaa", 1_000.0, [0]),  # old run
        b"inference-pod-a-1-bbbbbb": entry("inference-pod-a-1-bbbbbb", 9_900.0, [1, 2]),
        b"inference-pod-b-1-cccccc": entry("inference-pod-b-1-cccccc", 9_950.0, [3]),
        b"inference-pod-a-1-junk": b"not json",
    }
    mine = probe.own_entries(board, "", "pod-a")
    assert sorted(s.worker_id for s in mine) == [
        "inference-pod-a-1-aaaaaa",
        "inference-pod-a-1-bbbbbb",
    ]
    assert probe.board_ready(mine, now_ms=10_000.0, ttl_ms=2_000)[0]
    assert not probe.board_ready(mine, now_ms=20_000.0, ttl_ms=2_000)[0]
    rebalancing = probe.own_entries({b"inference-pod-a-1-d": entry("x", 9_990.0, [])}, "", "pod-a")
    assert not probe.board_ready(rebalancing, now_ms=10_000.0, ttl_ms=2_000)[0]  # no partition
    assert probe.board_alive(mine, now_ms=100_000.0, max_age_s=120)[0]
    assert not probe.board_alive(mine, now_ms=200_000.0, max_age_s=120)[0]
    assert not probe.board_alive([], now_ms=0.0, max_age_s=120)[0]
    configured = probe.own_entries(board, "inference-pod-b-1-cccccc", "pod-a")
    assert [s.worker_id for s in configured] == ["inference-pod-b-1-cccccc"]
