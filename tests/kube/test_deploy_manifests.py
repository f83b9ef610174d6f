"""Every manifest in deploy/ against the Kubernetes API schemas (kubernetes-validate,
which ships the schemas: no network), and the kustomization lists exactly the manifests
there are. RBAC is checked against what the adapter uses in test_rbac.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# The Kubernetes release the manifests are written for (the schemas' newest).
VERSION = kubernetes_validate.latest_version()


def manifests() -> list[tuple[str, int, dict[str, Any]]]:
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue  # kustomize's own file, not an API object (checked below)
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                out.append((path.name, index, doc))
    return out


@pytest.mark.parametrize(
    ("name", "index", "doc"),
    manifests(),
    ids=[f"{n}#{i}:{d.get('kind')}" for n, i, d in manifests()],
)
def test_each_manifest_is_valid_against_the_api_schema(
    name: str, index: int, doc: dict[str, Any]
) -> None:
    # strict: a field the schema does not know (a typo) is an error, as kubectl's is.
    kubernetes_validate.validate(doc, VERSION, strict=True)


def test_a_wrong_manifest_is_caught() -> None:
    """The positive control: the check does refuse what the API server would."""
    service = next(d for _n, _i, d in manifests() if d["kind"] == "Service")
    typo = {**service, "spec": {**service["spec"], "selectr": {"a": "b"}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, VERSION, strict=True)
    bad_port = {**service, "spec": {**service["spec"], "ports": [{"port": "https"}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad_port, VERSION, strict=True)


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
