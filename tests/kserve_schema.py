"""Offline validation of KServe resources against KServe's API types.

No package on the registries ships KServe's CRD files, but the KServe Python SDK
(``kserve`` on PyPI, pinned in locks/kserve.lock and downloaded, not installed, by
``make test``) carries the classes that openapi-generator made from the same
OpenAPI document as the CRDs: each has ``openapi_types`` (field -> type) and
``attribute_map`` (field -> JSON key). They are read from the wheel as data (no
import: the SDK's dependencies are not installed), and a resource is walked with
them strictly: an unknown key or a value of the wrong type is an error. The
Kubernetes types they embed (``V1Container``, ``V1Volume`` ...) are validated with
kubernetes-validate's strict JSON schemas of the same Kubernetes version.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

KSERVE_VERSION = "0.21.0"
WHEEL_DIR = Path(sys.prefix) / "kserve-sdk"


class KServeSchemaError(ValueError):
    pass


def _wheel() -> Path:
    wheels = sorted(WHEEL_DIR.glob(f"kserve-{KSERVE_VERSION}-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"no kserve {KSERVE_VERSION} wheel in {WHEEL_DIR}: make test "
                                "downloads it from locks/kserve.lock")
    return wheels[0]


_REQUIRED = re.compile(r"Invalid value for `(\w+)`, must not be `None`")


@cache
def kserve_types() -> dict[str, tuple[dict[str, str], dict[str, str], frozenset[str]]]:
    """class name -> (openapi_types, attribute_map, required attributes), from the SDK's
    generated models (a setter that refuses None marks a required field)."""
    types: dict[str, tuple[dict[str, str], dict[str, str], frozenset[str]]] = {}
    with zipfile.ZipFile(_wheel()) as wheel:
        for name in wheel.namelist():
            if not re.fullmatch(r"kserve/models/\w+\.py", name):
                continue
            source = wheel.read(name).decode()
            for node in ast.parse(source).body:
                if not isinstance(node, ast.ClassDef):
                    continue
                fields = {t.targets[0].id: ast.literal_eval(t.value) for t in node.body
                          if isinstance(t, ast.Assign) and isinstance(t.targets[0], ast.Name)
                          and t.targets[0].id in ("openapi_types", "attribute_map")}
                if len(fields) == 2:
                    required = frozenset(_REQUIRED.findall(ast.get_source_segment(source, node)))
                    types[node.name] = (fields["openapi_types"], fields["attribute_map"],
                                        required)
    return types


@cache
def _definitions(kubernetes: str) -> dict[str, Any]:
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    return json.loads((root / f"v{kubernetes}.0-local-strict" / "_definitions.json").read_text())


def _kubernetes_schema(type_name: str, kubernetes: str) -> dict[str, Any]:
    """The strict JSON schema of a Kubernetes API type named like the Python client."""
    match = re.fullmatch(r"V(\d+)(?:(alpha|beta)(\d+))?(\w+)", type_name)
    if not match:
        raise KServeSchemaError(f"unknown type {type_name}")
    version = "v" + "".join(g for g in match.groups()[:3] if g)
    suffix = f".{version}.{match.group(4)}"
    definitions = _definitions(kubernetes)["$defs"]
    keys = [k for k in definitions if k.endswith(suffix)]
    if len(keys) > 1:
        keys = [k for k in keys if k.startswith(("io.k8s.api.core.", "io.k8s.apimachinery."))]
    if len(keys) != 1:
        raise KServeSchemaError(f"no single Kubernetes schema for {type_name}: {keys}")
    return {**_definitions(kubernetes), "$ref": f"#/$defs/{keys[0]}"}


_SCALARS = {"str": str, "bool": bool, "int": int, "float": (int, float)}


def _check(value: Any, type_name: str, path: str, kubernetes: str) -> None:
    if type_name == "object":
        return
    if type_name in _SCALARS:
        ok = isinstance(value, _SCALARS[type_name]) and not (
            type_name in ("int", "float") and isinstance(value, bool))
        if not ok:
            raise KServeSchemaError(f"{path}: {value!r} is not {type_name}")
        return
    inner = re.fullmatch(r"list\[(.+)\]", type_name)
    if inner:
        if not isinstance(value, list):
            raise KServeSchemaError(f"{path}: not a list")
        for index, item in enumerate(value):
            _check(item, inner.group(1), f"{path}[{index}]", kubernetes)
        return
    inner = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if inner:
        if not isinstance(value, dict):
            raise KServeSchemaError(f"{path}: not a mapping")
        for key, item in value.items():
            _check(item, inner.group(1), f"{path}.{key}", kubernetes)
        return
    if type_name in kserve_types():
        openapi_types, attribute_map, required = kserve_types()[type_name]
        if not isinstance(value, dict):
            raise KServeSchemaError(f"{path}: not a mapping ({type_name})")
        by_key = {json_key: attr for attr, json_key in attribute_map.items()}
        missing = sorted(attribute_map[a] for a in required if attribute_map[a] not in value)
        if missing:
            raise KServeSchemaError(f"{path}: {type_name} needs {', '.join(missing)}")
        for key, item in value.items():
            if key not in by_key:
                raise KServeSchemaError(f"{path}: unknown field {key!r} in {type_name}")
            _check(item, openapi_types[by_key[key]], f"{path}.{key}", kubernetes)
        return
    try:
        jsonschema.Draft202012Validator(_kubernetes_schema(type_name, kubernetes)).validate(value)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        raise KServeSchemaError(f"{path}.{where}: {exc.message}") from None


KINDS = {
    ("serving.kserve.io/v1beta1", "InferenceService"): "V1beta1InferenceService",
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "V1alpha1ServingRuntime",
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "V1alpha1ClusterServingRuntime",
}


def validate(resource: dict[str, Any], kubernetes: str) -> str:
    """Raise :class:`KServeSchemaError` unless ``resource`` is a valid KServe resource;
    the SDK class it was checked as."""
    key = (resource.get("apiVersion"), resource.get("kind"))
    if key not in KINDS:
        raise KServeSchemaError(f"not a KServe resource this validator knows: {key}")
    _check(resource, KINDS[key], resource["kind"], kubernetes)
    return KINDS[key]
