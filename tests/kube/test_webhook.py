"""The mutating admission webhook (issue 12, item 1): the review as plain dict code, then
the real path — the ASGI application over TLS on loopback, a MutatingWebhookConfiguration
in the fake API server, which calls it on create as a real API server does — and a Job
created unsuspended that never has a pod before the queue admits it."""

from __future__ import annotations

import base64
import json
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from queueing.admission import tick
from queueing.choices import Phase
from queueing.cluster.kubernetes.client import ApiCallError
from queueing.cluster.kubernetes.webhook import ReviewError, review
from queueing.models import Workload
from queueing.webhookcert import issue
from tests.fakekube import ApiError, FakeKube
from tests.kube.conftest import ApiErrors, job_manifest, make_adapter
from tests.kube.test_kube_cycle import build_world
from tests.services import wait_until

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
KINDS = ["Job", "JobSet", "RayJob", "PyTorchJob", "TFJob", "MPIJob", "TrainJob"]


def request(obj: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    kind = obj.get("kind", "Job")
    group = {"Job": "batch", "RayJob": "ray.io", "MPIJob": "kubeflow.org"}.get(kind, "")
    body = {
        "uid": "u-1",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "namespace": "team-a",
        "operation": "CREATE",
        "object": obj,
        **overrides,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


def answer(body: dict[str, Any], namespaces: list[str] | None = None) -> dict[str, Any]:
    out = review(body, namespaces=namespaces or [], kinds=KINDS, now=NOW)
    assert out["response"]["uid"] == "u-1"
    return dict(out["response"])


def ops(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response.get("patchType") == "JSONPatch"
    return list(json.loads(base64.b64decode(response["patch"])))


# --- the review, without HTTP ------------------------------------------------------------


def test_an_unsuspended_job_is_suspended_and_stamped() -> None:
    job = job_manifest("j", suspend=False)
    job["metadata"].pop("annotations", None)
    patch = ops(answer(request(job)))
    assert {"op": "replace", "path": "/spec/suspend", "value": True} in patch
    stamps = next(o for o in patch if o["path"] == "/metadata/annotations")
    assert stamps["op"] == "add"
    assert stamps["value"]["koord-queue/job-enqueue-timestamp"] == "2026-01-02 03:04:05 +0000 UTC"
    assert stamps["value"]["kube-queue/job-has-enqueued"] == "true"


def test_missing_parents_are_added_with_the_flag() -> None:
    mpi = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "m", "annotations": {"team": "x"}},
        "spec": {"mpiReplicaSpecs": {}},
    }
    patch = ops(answer(request(mpi)))
    assert {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}} in patch
    # Existing annotations stay; each stamp is added on its own (a "/" escaped as "~1").
    assert {
        "op": "add",
        "path": "/metadata/annotations/koord-queue~1job-has-enqueued",
        "value": "true",
    } in patch


def test_what_is_not_the_queue_s_is_let_through_untouched() -> None:
    job = job_manifest("j", suspend=False)
    assert "patch" not in answer(request(job, operation="UPDATE"))
    assert "patch" not in answer(request(job), namespaces=["team-b"])
    owned = job_manifest("child", suspend=False)
    owned["metadata"]["ownerReferences"] = [{"kind": "JobSet", "uid": "x", "controller": True}]
    assert "patch" not in answer(request(owned))
    pod = {"kind": "Pod", "metadata": {"name": "p"}}
    assert answer(request(pod)) == {"uid": "u-1", "allowed": True}


def test_a_rayjob_kuberay_cannot_suspend_is_refused_with_the_reason() -> None:
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "r"},
        "spec": {"clusterSelector": {"ray.io/cluster": "shared"}},
    }
    response = answer(request(ray))
    assert response["allowed"] is False
    assert "spec.clusterSelector" in response["status"]["message"]
    ray["spec"] = {"rayClusterSpec": {}}
    response = answer(request(ray))
    assert "shutdownAfterJobFinishes: true" in response["status"]["message"]
    ray["spec"]["shutdownAfterJobFinishes"] = True
    assert answer(request(ray))["allowed"] is True


def test_a_review_it_cannot_read_is_an_error() -> None:
    with pytest.raises(ReviewError, match="AdmissionReview"):
        review({"kind": "Pod"}, namespaces=[], kinds=KINDS, now=NOW)
    with pytest.raises(ReviewError, match="uid"):
        review(
            {"apiVersion": "admission.k8s.io/v1", "request": {}},
            namespaces=[],
            kinds=KINDS,
            now=NOW,
        )


# --- over TLS, called by the fake API server ---------------------------------------------


@pytest.fixture
def webhook_url() -> Iterator[tuple[str, str]]:
    """The product's ASGI application served over TLS on loopback: (url, caBundle)."""
    from portal.asgi import application

    cert = issue([], ips=["127.0.0.1"])
    with tempfile.TemporaryDirectory() as tmp:
        certfile, keyfile = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        certfile.write_bytes(cert.cert_pem)
        keyfile.write_bytes(cert.key_pem)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            application,
            ssl_certfile=str(certfile),
            ssl_keyfile=str(keyfile),
            lifespan="off",
            log_level="warning",
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        wait_until(lambda: server.started, timeout=10, interval=0.02)
        try:
            yield f"https://127.0.0.1:{port}/webhooks/mutate", cert.ca_bundle
        finally:
            server.should_exit = True
            thread.join(10)
            sock.close()


def configuration(url: str, ca_bundle: str, *, failure: str = "Fail") -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "koord-queue"},
        "webhooks": [
            {
                "name": "jobs.koord-queue.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": failure,
                "timeoutSeconds": 5,
                "clientConfig": {"url": url, "caBundle": ca_bundle},
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": ["team-a"],
                        }
                    ]
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "resources": ["jobs"],
                    }
                ],
            }
        ],
    }


def pods_of(fake: FakeKube, job: str) -> list[dict[str, Any]]:
    return [e for e in fake.log_entries(types=["pod_start"]) if e.get("job") == job]


@pytest.mark.django_db
def test_a_job_created_unsuspended_never_has_a_pod_before_admission(
    fake: FakeKube,
    webhook_url: tuple[str, str],
    api_errors: ApiErrors,
    use_cluster: Callable[[Any], None],
) -> None:
    url, ca_bundle = webhook_url
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    fake.create("mutatingwebhookconfigurations", configuration(url, ca_bundle))
    for namespace in ("team-a", "team-b"):
        created = fake_create_over_http(cluster, namespace, job_manifest("eager", suspend=False))
        assert created["metadata"]["name"] == "eager"
    # Positive control: the namespace the webhook does not select runs its Job at once.
    wait_until(lambda: pods_of(fake, "team-b/eager"), timeout=10, interval=0.02)
    held = fake.store.get("jobs", "team-a", "eager")
    assert held["spec"]["suspend"] is True
    assert held["metadata"]["annotations"]["koord-queue/job-has-enqueued"] == "true"
    assert pods_of(fake, "team-a/eager") == []
    world.tick_until(lambda: Workload.objects.filter(name="eager", phase=Phase.ADMITTED).exists())
    wait_until(lambda: pods_of(fake, "team-a/eager"), timeout=10, interval=0.02)
    # Its whole history: created suspended, unsuspended once by the queue, pods after that.
    flips = [
        e
        for e in fake.log_entries(types=["suspend", "pod_start"])
        if e.get("object") == "team-a/eager" or e.get("job") == "team-a/eager"
    ]
    assert [(e["type"], e.get("suspend")) for e in flips[:2]] == [
        ("suspend", True),
        ("suspend", False),
    ]
    assert all(e["type"] == "pod_start" for e in flips[2:])
    assert flips[2:]
    tick(cluster=cluster)
    cluster.api.close()


def fake_create_over_http(cluster: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    return dict(cluster.rest.call("create", "POST", path, body=body))


@pytest.mark.django_db
def test_a_webhook_that_cannot_answer_fails_the_create_or_is_ignored(
    fake: FakeKube, webhook_url: tuple[str, str]
) -> None:
    url, ca_bundle = webhook_url
    fake.add_namespace("team-a")
    cluster = make_adapter(fake.url, namespaces=["team-a"])
    # Positive control: the same configuration pointing at the webhook works.
    fake.create("mutatingwebhookconfigurations", configuration(url, ca_bundle))
    held = fake_create_over_http(cluster, "team-a", job_manifest("held", suspend=False))
    assert held["spec"]["suspend"] is True
    fake.store.delete("mutatingwebhookconfigurations", None, "koord-queue")
    # Nobody listens on port 9 of loopback (discard): the call fails at once.
    fake.create(
        "mutatingwebhookconfigurations", configuration("https://127.0.0.1:9/mutate", ca_bundle)
    )
    with pytest.raises(ApiCallError, match="failed calling webhook") as refused:
        fake_create_over_http(cluster, "team-a", job_manifest("refused", suspend=False))
    assert refused.value.status == 500
    with pytest.raises(ApiError):
        fake.store.get("jobs", "team-a", "refused")
    fake.store.delete("mutatingwebhookconfigurations", None, "koord-queue")
    fake.create(
        "mutatingwebhookconfigurations",
        configuration("https://127.0.0.1:9/mutate", ca_bundle, failure="Ignore"),
    )
    created = fake_create_over_http(cluster, "team-a", job_manifest("through", suspend=False))
    assert created["spec"]["suspend"] is False  # Ignore: created as sent
    cluster.api.close()


# --- the certificate, installed by `manage.py webhook_cert --apply` ----------------------


@pytest.mark.django_db
def test_webhook_cert_installs_a_secret_and_the_ca_bundle(
    fake: FakeKube, use_cluster: Callable[[Any], None]
) -> None:
    import yaml
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from django.core.management import call_command

    fake.add_namespace("koord-queue")
    manifests = yaml.safe_load_all(Path("deploy/webhook.yaml").read_text())
    config = next(m for m in manifests if m["kind"] == "MutatingWebhookConfiguration")
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == ""
    fake.create("mutatingwebhookconfigurations", config)
    cluster = make_adapter(fake.url)
    use_cluster(cluster)
    out = StringIO()
    call_command("webhook_cert", "--apply", stdout=out)
    assert "koord-queue/koord-queue-webhook-tls created" in out.getvalue()
    secret = fake.store.get("secrets", "koord-queue", "koord-queue-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    served = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(ca_pem)
    # Signed by the CA, for the names the API server calls the Service by.
    key = ca.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    key.verify(
        served.signature,
        served.tbs_certificate_bytes,
        ec.ECDSA(served.signature_hash_algorithm),  # type: ignore[arg-type]
    )
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "koord-queue-webhook.koord-queue.svc" in names.get_values_for_type(x509.DNSName)
    stored = fake.store.get("mutatingwebhookconfigurations", None, "koord-queue")
    assert base64.b64decode(stored["webhooks"][0]["clientConfig"]["caBundle"]) == ca_pem
    # A second run replaces the pair (a new CA: the pods must restart to load it).
    call_command("webhook_cert", "--apply", stdout=StringIO())
    again = fake.store.get("secrets", "koord-queue", "koord-queue-webhook-tls")
    assert again["data"]["ca.crt"] != secret["data"]["ca.crt"]
    cluster.api.close()
