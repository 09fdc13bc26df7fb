"""What can be checked about k8s/ and Dockerfile.gpu without a cluster: the manifests parse, the
Serve config points at the real builder and at deployments that exist, every RAGSPINE_* variable
is a setting, and versions agree with pyproject.toml."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from ragspine.config import Settings

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
DOCKERFILE = ROOT / "Dockerfile.gpu"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                out.append((path.name, doc))
    return out


def _kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in _docs() if d["kind"] == kind]


def _rayservice() -> dict[str, Any]:
    (rs,) = _kind("RayService")
    return rs


def _serve_config() -> dict[str, Any]:
    return yaml.safe_load(_rayservice()["spec"]["serveConfigV2"])


def _pods() -> list[dict[str, Any]]:
    """Every pod template: Ray head and worker groups, StatefulSets."""
    spec = _rayservice()["spec"]["rayClusterConfig"]
    pods = [spec["headGroupSpec"]["template"]["spec"]]
    pods += [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    pods += [s["spec"]["template"]["spec"] for s in _kind("StatefulSet")]
    return pods


def _pin(extra: str, package: str) -> str:
    for req in PYPROJECT["project"]["optional-dependencies"][extra]:
        m = re.match(rf"{re.escape(package)}(\[[^\]]*\])?==([\w.]+)", req)
        if m:
            return m.group(2)
    raise AssertionError(f"no exact {package} pin in the {extra} extra")


def test_every_manifest_parses_and_names_itself() -> None:
    docs = _docs()
    assert {name for name, _ in docs} >= {"rayservice.yaml", "qdrant.yaml", "configmap.yaml", "storage.yaml"}
    for name, doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), name
        assert doc["metadata"].get("name"), name
    kinds = {d["kind"] for _, d in docs}
    assert kinds >= {"RayService", "StatefulSet", "Service", "Ingress", "PodDisruptionBudget",
                     "ConfigMap", "PersistentVolumeClaim"}


def test_import_path_resolves_to_the_real_builder() -> None:
    pytest.importorskip("ray.serve")
    from ragspine.serving import ray_app

    (app,) = _serve_config()["applications"]
    module, _, attr = app["import_path"].partition(":")
    assert getattr(importlib.import_module(module), attr) is ray_app.build_app
    ray_app.AppArgs.model_validate(app.get("args") or {})  # the args are valid builder args
    assert app["route_prefix"] == "/"


def test_every_configured_deployment_exists_in_code() -> None:
    pytest.importorskip("ray.serve")
    from ray.serve.schema import ServeDeploySchema

    from ragspine.serving import ray_app

    config = _serve_config()
    ServeDeploySchema.model_validate(config)  # Ray's own schema for serveConfigV2
    in_code = {d.name for d in (ray_app.Ingress, ray_app.PageEncoderDeployment,
                                ray_app.QueryEncoderDeployment, ray_app.DenseEncoderDeployment,
                                ray_app.RerankerDeployment)}
    assert in_code == set(ray_app.DEPLOYMENT_NAMES)
    named = [d["name"] for d in config["applications"][0]["deployments"]]
    assert set(named) <= in_code and len(named) == len(set(named))
    for d in config["applications"][0]["deployments"]:
        assert "autoscaling_config" in d and "ray_actor_options" in d, d["name"]
        if "user_config" in d:
            ray_app.ModelUserConfig.model_validate(d["user_config"])
    gpus = {d["name"]: d["ray_actor_options"].get("num_gpus", 0)
            for d in config["applications"][0]["deployments"]}
    assert gpus["Ingress"] == 0 and gpus["PageEncoder"] > 0 and gpus["QueryEncoder"] > 0
    assert sum(v for k, v in gpus.items() if k != "Ingress") <= 1.0  # one of each fits one GPU


def _env_names(obj: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str) and k.startswith("RAGSPINE_"):
                found.add(k)
            if k == "name" and isinstance(v, str) and v.startswith("RAGSPINE_"):
                found.add(v)
            found |= _env_names(v)
    elif isinstance(obj, list):
        for v in obj:
            found |= _env_names(v)
    elif isinstance(obj, str) and "RAGSPINE_" in obj and "\n" in obj:  # embedded YAML
        found |= _env_names(yaml.safe_load(obj))
    return found


def test_every_ragspine_variable_is_a_setting() -> None:
    names = set()
    for _, doc in _docs():
        names |= _env_names(doc)
    names |= set(re.findall(r"\bRAGSPINE_[A-Z0-9_]+", DOCKERFILE.read_text(encoding="utf-8")))
    assert names, "no RAGSPINE_* variable found: the test is not looking"
    settings = {f"RAGSPINE_{f.upper()}" for f in Settings.model_fields}
    assert sorted(names - settings) == []
    # Values in the ConfigMap are valid settings, together.
    (cm,) = _kind("ConfigMap")
    Settings(**{k.removeprefix("RAGSPINE_").lower(): v for k, v in cm["data"].items()})


def test_versions_agree_with_pyproject() -> None:
    ray_pin = _pin("serve", "ray")
    assert _rayservice()["spec"]["rayClusterConfig"]["rayVersion"] == ray_pin
    version = PYPROJECT["project"]["version"]
    images = {c["image"] for pod in _pods() for c in pod["containers"]}
    ours = {i for i in images if "ragspine" in i}
    assert ours and all(i.endswith(f":{version}") for i in ours), ours
    docker = DOCKERFILE.read_text(encoding="utf-8")
    assert f"torch==={_pin('gpu', 'torch')}" in docker
    m = re.search(r"ARG PYTHON=python(\d+)\.(\d+)", docker)
    assert m, "Dockerfile.gpu names no Python"
    floor = re.match(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert floor and tuple(map(int, m.groups())) >= tuple(map(int, floor.groups()))
    assert "'.[gpu,serve,multilingual]'" in docker
    # Qdrant server and client: the server is at least the client's floor (same major).
    client = next(r for r in PYPROJECT["project"]["optional-dependencies"]["server"] if r.startswith("qdrant-client"))
    cmaj, cmin = map(int, re.search(r">=(\d+)\.(\d+)", client).groups())  # type: ignore[union-attr]
    (qdrant,) = [c["image"] for pod in _pods() for c in pod["containers"] if "qdrant" in c["image"]]
    smaj, smin = map(int, re.search(r":v(\d+)\.(\d+)", qdrant).groups())  # type: ignore[union-attr]
    assert smaj == cmaj and smin >= cmin


def test_every_container_has_requests_and_limits_and_no_inline_secret() -> None:
    for pod in _pods():
        for c in pod["containers"]:
            res = c.get("resources", {})
            assert {"cpu", "memory"} <= set(res.get("requests", {})), c["name"]
            assert {"cpu", "memory"} <= set(res.get("limits", {})), c["name"]
            for e in c.get("env", []):
                if re.search(r"KEY|TOKEN|PASSWORD|SECRET", e["name"]):
                    assert "value" not in e and "secretKeyRef" in e["valueFrom"], e
    spec = _rayservice()["spec"]["rayClusterConfig"]
    groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert set(groups) == {"cpu", "gpu"}
    gpu, cpu = groups["gpu"], groups["cpu"]
    assert gpu["maxReplicas"] > gpu["minReplicas"] and spec["enableInTreeAutoscaling"] is True
    assert "nvidia.com/gpu" in gpu["template"]["spec"]["containers"][0]["resources"]["limits"]
    # The OCR stage's CPU workers: scale from zero, no GPU asked, as many Ray CPUs as the pod has.
    assert cpu["minReplicas"] == 0 < cpu["maxReplicas"]
    limits = cpu["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits and cpu["rayStartParams"]["num-cpus"] == limits["cpu"]
    assert not _kind("Secret"), "secrets are created by kubectl (k8s/README.md), never committed"


def test_qdrant_is_a_replicated_cluster_on_persistent_volumes() -> None:
    (sts,) = _kind("StatefulSet")
    assert sts["spec"]["replicas"] >= 3 and sts["spec"]["volumeClaimTemplates"]
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["QDRANT__CLUSTER__ENABLED"]["value"] == "true"
    assert int(env["QDRANT__STORAGE__COLLECTION__REPLICATION_FACTOR"]["value"]) >= 2
    assert "secretKeyRef" in env["QDRANT__SERVICE__API_KEY"]["valueFrom"]
    pdbs = {p["metadata"]["name"] for p in _kind("PodDisruptionBudget")}
    assert {"qdrant", "ragspine-gpu-workers"} <= pdbs
    (cm,) = _kind("ConfigMap")
    services = {s["metadata"]["name"] for s in _kind("Service")}
    host = re.match(r"https?://([^.:/]+)", cm["data"]["RAGSPINE_QDRANT_URL"]).group(1)  # type: ignore[union-attr]
    assert host in services


def test_the_ingress_reaches_the_serve_service_kuberay_creates() -> None:
    (ing,) = _kind("Ingress")
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == f"{_rayservice()['metadata']['name']}-serve-svc"
    port = _serve_config()["http_options"]["port"]
    assert backend["port"]["number"] == port


def test_dockerfile_is_non_root_with_healthcheck_and_model_cache() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^FROM .*cuda", text, re.M) or "nvidia/cuda" in text
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK ", text, re.M)
    assert re.search(r'^VOLUME .*"/models"', text, re.M) and "HF_HOME=/models" in text
    assert "RAY_USAGE_STATS_ENABLED=0" in text and "HF_HUB_DISABLE_TELEMETRY=1" in text  # sends nothing
    for line in re.findall(r"^(?:ENV|ARG) .*$", text, re.M):
        assert not re.search(r"(KEY|TOKEN|PASSWORD|SECRET)\s*=", line), line
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert ".venv" in ignored and ".git" in ignored


def test_ingress_replicas_scale_out_with_writer_leases_and_drain_their_writes() -> None:
    """2-8 Ingress replicas write one Qdrant: leases on, each replica named by its pod, and a
    drained replica given time to finish its writes (and release their leases) before it stops."""
    (cm,) = _kind("ConfigMap")
    s = Settings(**{k.removeprefix("RAGSPINE_").lower(): v for k, v in cm["data"].items()})
    assert s.writer_leases == "on" and s.qdrant_url
    (rs,) = _kind("RayService")
    serve = yaml.safe_load(rs["spec"]["serveConfigV2"])
    (ingress,) = [d for d in serve["applications"][0]["deployments"] if d["name"] == "Ingress"]
    assert ingress["autoscaling_config"]["max_replicas"] > 1
    grace = ingress["graceful_shutdown_timeout_s"]
    head = rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert head["terminationGracePeriodSeconds"] > grace >= s.writer_lease_seconds
    env = {e["name"]: e for e in head["containers"][0]["env"]}
    assert env["RAGSPINE_REPLICA_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
