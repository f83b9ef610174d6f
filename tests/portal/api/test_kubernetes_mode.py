"""Submitting through the API in kubernetes mode: a suspended batch/v1 Job appears in the
tenant's namespace, from pod sets, a pod template or a whole Job (the fake API server
over real HTTP on loopback, with the real adapter)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from queueing import compat, jobspec
from queueing.cluster import set_cluster
from queueing.cluster.kubernetes import KubernetesCluster, RetryPolicy
from queueing.cluster.kubernetes import pod_requests as adapter_pod_requests
from queueing.models import Workload
from tests.fakekube import FakeKube, api_client
from tests.fakekube.fixtures import fake_kube_factory  # noqa: F401
from tests.portal.api.conftest import ApiWorld

pytestmark = pytest.mark.django_db
URL = "/api/v1/workloads/"
NAMESPACE = "team-a-train"
FAST = RetryPolicy(budget_s=10.0, base_s=0.001, cap_s=0.02, max_retry_after_s=2.0)


@pytest.fixture
def kube(
    api: ApiWorld,
    settings: Any,
    fake_kube_factory: Callable[..., FakeKube],  # noqa: F811
) -> Iterator[tuple[FakeKube, KubernetesCluster]]:
    fake = fake_kube_factory(time_scale=0.01, seed=0)
    fake.add_namespace(NAMESPACE)
    cluster = KubernetesCluster(
        api_client(fake.url, retries=False), on_error=lambda *_: None, namespaces=[NAMESPACE], policy=FAST
    )  # fmt: skip
    settings.KQ_CLUSTER = "kubernetes"
    set_cluster(cluster)
    yield fake, cluster
    set_cluster(None)
    cluster.api.close()


def job(cluster: KubernetesCluster, name: str) -> dict[str, Any]:
    return dict(
        cluster.rest.call("get", "GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{name}")
    )


CONTAINER = {
    "name": "main",
    "image": "python:3.11",
    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
}


def test_from_pod_sets(api: ApiWorld, kube: Any) -> None:
    _, cluster = kube
    data = {"name": "plain", "queue": "team-a-train", "expected_runtime_s": 30,
            "pod_sets": [{"count": 2, "requests": {"cpu": "500m", "memory": "1Gi"}}]}  # fmt: skip
    response = api.call("member", "post", URL, data)
    assert response.status_code == 201, response.json()
    created = job(cluster, "plain")
    assert created["spec"]["suspend"] is True
    assert created["spec"]["parallelism"] == 2
    assert created["metadata"]["labels"][compat.QUEUE_LABEL] == "team-a-train"
    assert Workload.objects.get(name="plain").object_uid == created["metadata"]["uid"]


def test_from_a_pod_template(api: ApiWorld, kube: Any) -> None:
    _, cluster = kube
    data = {"name": "templated", "queue": "team-a-train",
            "template": {"metadata": {"labels": {"app": "etl"}}, "spec": {"containers": [CONTAINER]}},
            "pod_sets": [{"count": 3, "requests": {"cpu": "2", "memory": "4Gi"}}]}  # fmt: skip
    response = api.call("member", "post", URL, data)
    assert response.status_code == 201, response.json()
    created = job(cluster, "templated")
    assert (created["spec"]["suspend"], created["spec"]["parallelism"]) == (True, 3)
    pod = created["spec"]["template"]
    assert pod["metadata"]["labels"]["app"] == "etl"
    assert pod["spec"]["containers"][0]["image"] == "python:3.11"
    assert pod["spec"]["restartPolicy"] == "Never"


def test_from_a_whole_job(api: ApiWorld, kube: Any) -> None:
    _, cluster = kube
    manifest = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"labels": {"team": "vision"}},
                "spec": {"parallelism": 4, "completions": 8, "suspend": False,
                         "template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}}}  # fmt: skip
    response = api.call("member", "post", URL, {"name": "whole", "queue": "team-a-train", "manifest": manifest})  # fmt: skip
    assert response.status_code == 201, response.json()
    assert response.json()["pod_sets"][0]["count"] == 4
    created = job(cluster, "whole")
    assert created["spec"]["suspend"] is True  # whatever the manifest said
    assert (created["spec"]["parallelism"], created["spec"]["completions"]) == (4, 8)
    assert created["metadata"]["labels"]["team"] == "vision"


def test_a_job_that_disagrees_with_its_pod_sets_is_refused_before_the_cluster(
    api: ApiWorld, kube: Any
) -> None:
    template = {"spec": {"containers": [CONTAINER]}}
    data = {"name": "odd", "queue": "team-a-train", "template": template,
            "pod_sets": [{"count": 1, "requests": {"cpu": "1"}}]}  # fmt: skip
    response = api.call("member", "post", URL, data)
    assert response.status_code == 400
    assert "pod_sets" in response.json()["fields"]
    assert not Workload.objects.filter(name="odd").exists()
    _, cluster = kube
    listed = cluster.rest.call("list", "GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")
    assert listed["items"] == []  # nothing reached the cluster


@pytest.mark.parametrize(
    "pod_spec",
    [
        {"containers": [CONTAINER]},
        {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 2}}},
                        {"name": "b", "resources": {"requests": {"cpu": "250m"}}}]},
        {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
         "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
                            {"name": "proxy", "restartPolicy": "Always",
                             "resources": {"requests": {"cpu": "100m"}}}],
         "overhead": {"cpu": "50m"}},
        {"containers": [{"name": "a", "resources": {"requests": {"cpu": "0", "memory": "1Mi"}}}]},
    ],
)  # fmt: skip
def test_the_api_reads_pods_as_the_adapter_does(pod_spec: dict[str, Any]) -> None:
    """jobspec (the API, no kubernetes import) and the adapter must size pods alike, or the
    adapter would refuse what the API accepted."""
    assert jobspec.pod_requests(pod_spec) == adapter_pod_requests(pod_spec)
