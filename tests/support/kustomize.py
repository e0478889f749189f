"""``kubectl kustomize`` for the tests: deploy/'s overlays rendered as the cluster would get them."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
OVERLAYS = ("dev", "production", "minilm")


def kubectl() -> str:
    found = shutil.which("kubectl")
    assert found, "kubectl is missing: the machine image ships it (kustomize >= v5 built in); see docs/deploy.md"
    return found


@functools.cache
def render(directory: str) -> tuple[dict[str, Any], ...]:
    """The objects ``kubectl kustomize deploy/<directory>`` prints, in its order."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def kustomization(directory: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return loaded
