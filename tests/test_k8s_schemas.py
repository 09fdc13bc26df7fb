"""The manifests against the schemas the API server and the KubeRay operator apply, offline:

- every core object (and every pod template inside the RayService, as a Pod) validates
  strictly (unknown fields are errors) against the Kubernetes API schemas that
  ``kubernetes-validate`` ships, for the oldest and the newest Kubernetes version it knows that
  ``k8s/README.md`` supports;
- the RayService validates against KubeRay's own CRD schema, vendored from the KubeRay
  repository at the operator version ``k8s/README.md`` names (``tests/k8s_schemas``), with
  unknown fields refused as the API server's strict field validation refuses them.

Each check is shown to fire on a manifest with one mistake in it.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")  # dev extra; make test requires it

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
SCHEMAS = Path(__file__).resolve().parent / "k8s_schemas"
#: The Kubernetes versions the core objects are checked against (k8s/README.md names the floor).
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")


def _docs() -> list[dict[str, Any]]:
    return [d for p in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d]


def _kuberay_version() -> str:
    m = re.search(r"KubeRay\s+operator \((\d+\.\d+\.\d+) or later\)", (K8S / "README.md").read_text(encoding="utf-8"))
    assert m, "k8s/README.md names no KubeRay version"
    return m.group(1)


def _crd_schema() -> dict[str, Any]:
    path = SCHEMAS / f"kuberay-v{_kuberay_version()}-rayservice-v1.json"
    assert path.is_file(), f"no vendored RayService schema for the KubeRay version k8s/README.md names: {path.name}"
    return json.loads(path.read_text(encoding="utf-8"))


def _pods_as_objects(rs: dict[str, Any]) -> list[dict[str, Any]]:
    """The RayService's pod templates as Pod objects, to check them as the API server will."""
    cluster = rs["spec"]["rayClusterConfig"]
    groups = [("head", cluster["headGroupSpec"])] + [(g["groupName"], g) for g in cluster["workerGroupSpecs"]]
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"ragspine-{name}",
                                                               **g["template"].get("metadata", {})},
             "spec": g["template"]["spec"]} for name, g in groups]


def core_errors(docs: list[dict[str, Any]]) -> list[str]:
    errors = []
    for doc in docs:
        objects = _pods_as_objects(doc) if doc["kind"] == "RayService" else [doc]
        for obj in objects:
            for version in KUBERNETES_VERSIONS:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    errors.append(f"{obj['kind']} {obj['metadata'].get('name')} ({version}): {exc.message}")
    return errors


def _unknown_fields(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Fields the schema does not declare where it declares the others (strict field
    validation; structural schemas leave additionalProperties out, so jsonschema passes them)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if props is not None and key in props:
                out += _unknown_fields(sub, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += _unknown_fields(sub, extra, f"{path}.{key}")
            elif props is not None and extra is None:
                out.append(f"{path}.{key}: unknown field")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += _unknown_fields(item, schema["items"], f"{path}[{i}]")
    return out


def crd_errors(rs: dict[str, Any]) -> list[str]:
    schema = _crd_schema()
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft7Validator(schema).iter_errors(rs)]
    body = {k: v for k, v in rs.items() if k not in ("apiVersion", "kind", "metadata")}
    return errors + _unknown_fields(body, schema, "")


def _rayservice() -> dict[str, Any]:
    (rs,) = [d for d in _docs() if d["kind"] == "RayService"]
    return rs


def test_core_objects_validate_strictly_against_the_kubernetes_schemas() -> None:
    docs = _docs()
    assert {d["kind"] for d in docs} >= {"ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget",
                                         "Ingress", "PersistentVolumeClaim", "RayService"}
    assert core_errors(docs) == []


def test_the_rayservice_validates_against_kuberays_crd() -> None:
    assert crd_errors(_rayservice()) == []


def test_a_core_mistake_is_caught() -> None:
    docs = copy.deepcopy(_docs())
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    sts["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"  # a typo
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    pvc["spec"]["accessModes"] = "ReadWriteMany"  # a string where a list belongs
    rs = next(d for d in docs if d["kind"] == "RayService")
    rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"][
        "limits"]["cpu"] = [2]
    errors = core_errors(docs)
    assert any(e.startswith("PersistentVolumeClaim") and "'ReadWriteMany' is not of type 'array'" in e
               for e in errors), errors
    assert any(e.startswith("StatefulSet") and "imagePullPolcy" in e for e in errors), errors
    assert any(e.startswith("Pod ragspine-head") for e in errors), errors


def test_a_rayservice_mistake_is_caught() -> None:
    rs = copy.deepcopy(_rayservice())
    rs["spec"]["rayClusterConfig"]["rayversion"] = rs["spec"]["rayClusterConfig"].pop("rayVersion")  # a typo
    rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplicas"] = "many"
    errors = crd_errors(rs)
    assert ".spec.rayClusterConfig.rayversion: unknown field" in errors
    assert any("'many' is not of type 'integer'" in e for e in errors), errors
