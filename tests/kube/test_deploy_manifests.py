"""Every manifest in deploy/ against the Kubernetes API schemas (kubernetes-validate,
which ships the schemas: no network), and the kustomization lists exactly the manifests
there are. RBAC is checked against what the adapter uses in test_rbac.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.kube import certmanager_schema

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


# --- the cert-manager variant (deploy/cert-manager/) ----------------------------------------

CERT_MANAGER = DEPLOY / "cert-manager"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _cert_manager_objects() -> list[dict[str, Any]]:
    return _docs(CERT_MANAGER / "certificate.yaml")


@pytest.mark.parametrize(
    "doc",
    _cert_manager_objects(),
    ids=[f"{d['kind']}:{d['metadata']['name']}" for d in _cert_manager_objects()],
)
def test_each_cert_manager_object_is_valid_against_its_schema(doc: dict[str, Any]) -> None:
    jsonschema.validate(doc, certmanager_schema.SCHEMAS[doc["kind"]])


def test_a_wrong_cert_manager_object_is_caught() -> None:
    """The positive control: a misspelt field, a bad duration, a missing issuer."""
    cert = next(d for d in _cert_manager_objects() if d["kind"] == "Certificate")
    schema = certmanager_schema.CERTIFICATE
    for bad in (
        {**cert, "spec": {**cert["spec"], "dnsName": ["x"]}},
        {**cert, "spec": {**cert["spec"], "duration": "90 days"}},
        {**cert, "spec": {k: v for k, v in cert["spec"].items() if k != "issuerRef"}},
        {**cert, "spec": {**cert["spec"], "usages": ["server-auth"]}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_the_cert_manager_variant_fits_the_webhook_it_certifies() -> None:
    """The overlay's names agree with deploy/: the Secret the webhook mounts, the names
    the API server calls its Service by, the issuers, and the CA injection annotation."""
    base = {(d["kind"], d["metadata"]["name"]): d for _n, _i, d in manifests()}
    namespace = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["namespace"]
    overlay = yaml.safe_load((CERT_MANAGER / "kustomization.yaml").read_text())
    assert overlay["namespace"] == namespace
    assert set(overlay["resources"]) == {"..", "certificate.yaml"}
    present = {p.name for p in CERT_MANAGER.glob("*.yaml")} - {"kustomization.yaml"}
    assert present == {"certificate.yaml"} | {p["path"] for p in overlay["patches"]}

    objects = {(d["kind"], d["metadata"]["name"]): d for d in _cert_manager_objects()}
    webhook = base[("Deployment", "koord-queue-webhook")]["spec"]["template"]["spec"]
    mounted = {v["secret"]["secretName"] for v in webhook["volumes"] if "secret" in v}
    serving = objects[("Certificate", "koord-queue-webhook")]
    assert serving["spec"]["secretName"] in mounted
    service = base[("Service", "koord-queue-webhook")]["metadata"]["name"]
    assert f"{service}.{namespace}.svc" in serving["spec"]["dnsNames"]
    for cert in (d for d in objects.values() if d["kind"] == "Certificate"):
        ref = cert["spec"]["issuerRef"]
        assert ref.get("kind", "Issuer") == "Issuer"
        assert ("Issuer", ref["name"]) in objects  # every issuer it names is here
    ca_issuer = objects[("Issuer", serving["spec"]["issuerRef"]["name"])]
    ca_cert = next(
        d
        for d in objects.values()
        if d["kind"] == "Certificate"
        and d["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]
    )
    assert ca_cert["spec"]["isCA"] is True

    patch = overlay["patches"][0]
    target = patch["target"]
    configuration = base[(target["kind"], target["name"])]
    patched = _docs(CERT_MANAGER / patch["path"])[0]
    assert (patched["kind"], patched["metadata"]["name"]) == (target["kind"], target["name"])
    injected = patched["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert injected == f"{namespace}/{serving['metadata']['name']}"
    merged = {
        **configuration,
        "metadata": {
            **configuration["metadata"],
            "annotations": {
                **configuration["metadata"].get("annotations", {}),
                **patched["metadata"]["annotations"],
            },
        },
    }
    kubernetes_validate.validate(merged, VERSION, strict=True)
    # Only metadata is patched: the webhook itself is the one the base validates.
    assert {k: v for k, v in patched.items() if k != "metadata"} == {
        "apiVersion": configuration["apiVersion"],
        "kind": configuration["kind"],
    }
