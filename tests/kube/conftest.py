"""Fixtures for the Kubernetes adapter tests.

`kube` is where an adapter test runs: the fake API server always, and a real cluster
too when `KUBECONFIG` and `KQ_TEST_REAL_CLUSTER=1` are set (those runs carry the
`kubernetes_real` marker: `pytest -m kubernetes_real`). Tests that steer the fake
(faults, its log, its clock) take `fake` and `adapter` directly.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from queueing.cluster import set_cluster
from queueing.cluster.kubernetes import KubernetesCluster, RetryPolicy, connect
from tests.fakekube import RUNTIME_ANNOTATION, FakeKube, api_client
from tests.fakekube.fixtures import (  # noqa: F401
    fake_kube,
    fake_kube_factory,
    fake_kube_process,
    kube_client,
)

# Retries that keep the tests fast: the backoff is milliseconds, the budget seconds.
FAST = RetryPolicy(budget_s=10.0, base_s=0.001, cap_s=0.02, max_retry_after_s=2.0)
REAL = bool(os.environ.get("KUBECONFIG")) and os.environ.get("KQ_TEST_REAL_CLUSTER") == "1"
POOL_LABEL = "koord-queue/pool"


@dataclass
class ApiErrors:
    """What the adapter would count in /metrics, kept in memory."""

    seen: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, verb: str, label: str) -> None:
        self.seen.append((verb, label))


@pytest.fixture
def api_errors() -> ApiErrors:
    return ApiErrors()


@pytest.fixture
def fake(fake_kube_factory: Callable[..., FakeKube]) -> FakeKube:  # noqa: F811
    """Jobs run 100x faster than declared (1 s of runtime takes 10 ms)."""
    return fake_kube_factory(time_scale=0.01, seed=0, bookmark_interval=0.2)


def make_adapter(url: str, errors: ApiErrors | None = None, **options: Any) -> KubernetesCluster:
    options.setdefault("policy", FAST)
    return KubernetesCluster(
        api_client(url, retries=False), on_error=errors or ApiErrors(), **options
    )


@pytest.fixture
def adapter(fake: FakeKube, api_errors: ApiErrors) -> Iterator[KubernetesCluster]:
    cluster = make_adapter(fake.url, api_errors)
    yield cluster
    cluster.api.close()


def job_manifest(
    name: str | None = None,
    *,
    suspend: bool = True,
    parallelism: int = 1,
    cpu: str = "1",
    memory: str = "64Mi",
    runtime: float | None = 1.0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    priority_class: str | None = None,
    deadline: int | None = None,
) -> dict[str, Any]:
    """A batch Job a user would apply. On a real cluster it sleeps for its runtime."""
    meta: dict[str, Any] = {"labels": dict(labels or {}), "annotations": dict(annotations or {})}
    meta.update({"name": name} if name else {"generateName": "job-"})
    seconds = runtime if runtime is not None else 1.0
    meta["annotations"].setdefault(RUNTIME_ANNOTATION, str(seconds))
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "command": ["sh", "-c", f"sleep {seconds:g}"],
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
    }
    if node_selector:
        pod["nodeSelector"] = node_selector
    if priority_class:
        pod["priorityClassName"] = priority_class
    spec: dict[str, Any] = {
        "suspend": suspend,
        "parallelism": parallelism,
        "completions": parallelism,
        "template": {"spec": pod},
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


@dataclass
class Kube:
    """A cluster an adapter test runs against, with a namespace of its own."""

    cluster: KubernetesCluster
    namespace: str
    fake: FakeKube | None = None

    def create(self, body: dict[str, Any], path: str | None = None) -> dict[str, Any]:
        path = path or f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
        return dict(self.cluster.rest.call("create", "POST", path, body=body))

    def job(self, name: str) -> dict[str, Any]:
        path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{name}"
        return dict(self.cluster.rest.call("get", "GET", path))


def _real_cluster(errors: ApiErrors) -> Iterator[Kube]:
    cluster = KubernetesCluster(connect(os.environ["KUBECONFIG"]), on_error=errors)
    namespace = f"kq-test-{uuid.uuid4().hex[:8]}"
    cluster.rest.call(
        "create", "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}}
    )
    cluster.namespaces = [namespace]
    try:
        yield Kube(cluster, namespace)
    finally:
        cluster.rest.call("delete", "DELETE", f"/api/v1/namespaces/{namespace}")


@pytest.fixture(
    params=[
        "fake",
        pytest.param(
            "real",
            marks=[
                pytest.mark.kubernetes_real,
                pytest.mark.skipif(
                    not REAL,
                    reason="a real cluster needs KUBECONFIG and KQ_TEST_REAL_CLUSTER=1",
                ),
            ],
        ),
    ]
)
def kube(request: pytest.FixtureRequest, api_errors: ApiErrors) -> Iterator[Kube]:
    if request.param == "real":
        yield from _real_cluster(api_errors)
        return
    fake: FakeKube = request.getfixturevalue("fake")
    fake.add_namespace("team-a")
    fake.add_node("node-1", {"cpu": "8", "memory": "32Gi"}, labels={POOL_LABEL: "a"})
    fake.add_node("node-2", {"cpu": "8", "memory": "32Gi"}, labels={POOL_LABEL: "b"})
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a"])
    yield Kube(cluster, "team-a", fake)
    cluster.api.close()


@pytest.fixture
def use_cluster() -> Iterator[Callable[[Any], None]]:
    """Make an adapter the process-wide cluster (what actions.submit_workload uses)."""
    yield set_cluster
    set_cluster(None)
