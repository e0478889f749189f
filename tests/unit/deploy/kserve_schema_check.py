"""Run by tests/unit/deploy/test_kserve.py in .venv-kserve (the KServe SDK's own venv): checks
KServe documents against the SDK's generated models (kserve.models, which mirror KServe's CRD
OpenAPI schema, and kubernetes.client.models for the core types they embed).

Usage: python kserve_schema_check.py FILE.yaml...  -> prints a JSON list of problems, one string
each ("<file>:<kind>:<path>: <what>"); an empty list when every document fits. Checked: every
field is one the model declares (by its JSON name), each value has the declared type (objects,
lists, maps, str/int/bool), and the model's own client-side validation (required fields) passes.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import kserve.models
import kubernetes.client.models  # type: ignore[import-not-found]
import yaml  # type: ignore[import-untyped]

TOP = {"ServingRuntime": "V1alpha1ServingRuntime", "InferenceService": "V1beta1InferenceService"}
PRIMITIVES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}


def _model(name: str) -> Any:
    return getattr(kserve.models, name, None) or getattr(kubernetes.client.models, name, None)


def check(value: Any, kind: str, path: str, problems: list[str]) -> None:
    if (inner := re.fullmatch(r"[lL]ist\[(.+)\]", kind)) is not None:
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list ({kind})")
            return
        for i, item in enumerate(value):
            check(item, inner.group(1), f"{path}[{i}]", problems)
        return
    if (inner := re.fullmatch(r"(?:dict\(str, (.+)\)|Dict\[str, (.+)\])", kind)) is not None:
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a map ({kind})")
            return
        for key, item in value.items():
            check(item, inner.group(1) or inner.group(2), f"{path}.{key}", problems)
        return
    if kind in ("object", "datetime"):
        return
    if kind in PRIMITIVES:
        if not isinstance(value, PRIMITIVES[kind]) or (kind != "bool" and isinstance(value, bool)):
            problems.append(f"{path}: expected {kind}, got {value!r}")
        return
    model = _model(kind)
    if model is None:
        problems.append(f"{path}: unknown model {kind}")
        return
    if not isinstance(value, dict):
        problems.append(f"{path}: expected an object ({kind})")
        return
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    known = {}
    for key, item in value.items():
        if key not in by_json:
            problems.append(f"{path}.{key}: no such field in {kind}")
            continue
        known[by_json[key]] = item
        check(item, model.openapi_types[by_json[key]], f"{path}.{key}", problems)
    try:
        model(**known)  # the generated setters: required fields, enums
    except (ValueError, TypeError) as error:
        problems.append(f"{path}: {kind}: {error}")


def main(files: list[str]) -> None:
    problems: list[str] = []
    for name in files:
        with open(name) as handle:
            for doc in filter(None, yaml.safe_load_all(handle)):
                kind = doc.get("kind")
                if kind not in TOP:
                    problems.append(f"{name}: kind {kind!r} is not checked here")
                    continue
                check(doc, TOP[kind], f"{name}:{kind}", problems)
    print(json.dumps(problems))


if __name__ == "__main__":
    main(sys.argv[1:])
