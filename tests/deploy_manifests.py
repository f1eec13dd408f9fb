"""deploy/ as it would be applied: `kubectl kustomize` of a target, and the one resource
of a kind (and name) among the rendered ones."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache

import yaml

from kyc_testing import PROJECT_ROOT

KUBERNETES_VERSION = "1.32"  # the kubectl of these machines; kubernetes-validate ships it
DEPLOY = PROJECT_ROOT / "deploy"
KSERVE = "kserve"


@cache
def rendered(target: str) -> tuple[dict, ...]:
    """`kubectl kustomize deploy/<target>`: the resources as they would be applied."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render deploy/ with kustomize (kubectl kustomize)"
    out = subprocess.run([kubectl, "kustomize", str(DEPLOY / target)], check=True,
                         capture_output=True, text=True).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def one(resources, kind: str, name: str | None = None) -> dict:
    found = [r for r in resources if r["kind"] == kind
             and (name is None or r["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} found"
    return found[0]
