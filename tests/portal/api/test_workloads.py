"""Submitting, following and cancelling workloads; list filters, ordering and pages."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from queueing.choices import Phase
from queueing.cluster import set_cluster
from queueing.cluster.base import JobRef, JobRequest
from queueing.cluster.simulated import SimulatedCluster
from queueing.models import SimJob, Workload
from tests import builders
from tests.portal.api.conftest import ApiWorld

pytestmark = pytest.mark.django_db
URL = "/api/v1/workloads/"


class RecordingCluster(SimulatedCluster):
    """The simulated cluster, remembering each JobRequest (what kubernetes mode receives)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[JobRequest] = []

    def create_job(self, request: JobRequest) -> JobRef:
        self.requests.append(request)
        return super().create_job(request)


@pytest.fixture
def recording(api: ApiWorld) -> RecordingCluster:
    cluster = RecordingCluster(clock=api.w.clock, failure_rate=0)
    set_cluster(cluster)
    return cluster


def test_submit_with_a_queue_and_quantities(api: ApiWorld) -> None:
    data = {
        "name": "train-resnet",
        "queue": "team-a-train",
        "priority": 5500,
        "expected_runtime_s": 600,
        "labels": {"team": "vision"},
        "pod_sets": [
            {"name": "workers", "count": 4, "requests": {"cpu": "2", "memory": "8Gi"}},
            {"name": "driver", "requests": {"cpu": "500m", "memory": "512Mi"}},
        ],
    }
    response = api.call("member", "post", URL, data)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["tenant"], body["quota"], body["queue"]) == ("team-a", "team-a-train", "team-a-train")  # fmt: skip
    assert body["namespace"] == "team-a-train"
    assert body["total_request"] == {"cpu": "8500m", "memory": "33280Mi"}
    assert body["priority_band"] == "koord-batch"
    assert (body["phase"], body["kube_queue_phase"]) == ("Pending", "Enqueued")
    assert body["submitted_by"] == "mo"
    assert body["source"] == "api"
    workload = Workload.objects.get(pk=body["id"])
    assert workload.pod_sets[0]["requests"] == {"cpu": 2000, "memory": 8 * 2**30}
    assert SimJob.objects.get(name="train-resnet").suspended


def test_submit_by_namespace_or_quota(api: ApiWorld) -> None:
    by_namespace = {"name": "ns-job", "namespace": "team-a-train", "pod_sets": [{"requests": {"cpu": 1}}]}  # fmt: skip
    assert api.call("member", "post", URL, by_namespace).json()["quota"] == "team-a-train"
    by_quota = {"name": "q-job", "quota": "team-a-train", "pod_sets": [{"requests": {"cpu": 1}}]}
    assert api.call("member", "post", URL, by_quota).json()["queue"] == "team-a-train"


def test_submit_a_full_job_manifest(api: ApiWorld, recording: RecordingCluster) -> None:
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "from-yaml", "labels": {"app": "bert"}},
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"koord-queue/pool": "gpu"},
                    "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "4"}}}],
                    "containers": [
                        {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
                        {"name": "b", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": 1}}},
                    ],
                }
            },
        },
    }
    data = {"name": "from-yaml", "queue": "team-a-train", "manifest": manifest}
    response = api.call("member", "post", URL, data)
    assert response.status_code == 201, response.json()
    (pod_set,) = response.json()["pod_sets"]
    # Containers sum to 3 cpu, the init container needs 4: a pod requests the larger.
    assert pod_set["count"] == 3
    assert pod_set["requests"] == {"cpu": "4", "memory": "2Gi", "nvidia.com/gpu": "1"}
    assert pod_set["node_selector"] == {"koord-queue/pool": "gpu"}
    (request,) = recording.requests
    assert request.manifest is not None
    assert request.manifest["spec"]["suspend"] is True
    assert request.manifest["metadata"]["name"] == "from-yaml"
    assert manifest["spec"].get("suspend") is None  # the caller's dict is not touched


def test_submit_a_pod_template(api: ApiWorld, recording: RecordingCluster) -> None:
    template = {"spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "250m"}}}]}}  # fmt: skip
    data = {"name": "tmpl", "queue": "team-a-train", "template": template}
    response = api.call("member", "post", URL, data)
    assert response.status_code == 201, response.json()
    assert response.json()["pod_sets"][0]["requests"] == {"cpu": "250m"}
    # The adapter wraps the template in a suspended Job (tests/portal/api/test_kubernetes_mode.py).
    assert recording.requests[0].manifest == template


def test_a_manifest_that_names_another_job_is_refused(api: ApiWorld) -> None:
    manifest = {"metadata": {"name": "other"}, "spec": {"template": {"spec": {"containers": []}}}}
    data = {"name": "mine", "queue": "team-a-train", "manifest": manifest}
    response = api.call("member", "post", URL, data)
    assert response.status_code == 400
    assert "metadata.name" in response.json()["fields"]["manifest"][0]


def test_follow_position_eta_and_reason(api: ApiWorld) -> None:
    eta = timezone.now() + timedelta(minutes=5)
    Workload.objects.filter(pk=api.workload.pk).update(
        position=2,
        global_position=7,
        eta_p50=eta,
        eta_p90=eta + timedelta(minutes=3),
        reason="Quota team-a-train is short of cpu 1.",
        explanation={"blocked_by": "team-a-train", "shortfall": {"cpu": 1000}},
    )
    body = api.call("viewer", "get", f"{URL}{api.workload.pk}/").json()
    assert (body["position"], body["global_position"]) == (2, 7)
    assert body["eta_p50"].startswith(eta.strftime("%Y-%m-%dT%H:%M"))
    assert body["explanation"]["blocked_by"] == "team-a-train"


def test_cancel_stops_the_job_and_records_why(api: ApiWorld) -> None:
    url = f"{URL}{api.workload.pk}/cancel/"
    response = api.call("member", "post", url, {"reason": "wrong data set"})
    assert response.status_code == 200
    assert response.json()["phase"] == "Cancelled"
    assert not SimJob.objects.filter(name="a-job-1").exists()
    events = api.call("viewer", "get", f"{URL}{api.workload.pk}/events/").json()
    assert [e["to_phase"] for e in events] == ["Pending", "Cancelled"]
    assert events[-1]["message"] == "wrong data set"
    again = api.call("member", "post", url, {})
    assert again.status_code == 409
    assert again.json()["code"] == "refused"


def test_filters(api: ApiWorld) -> None:
    for i in range(3):
        builders.submit(api.w, f"hi-{i}", quota=api.train, priority=9000)
    done = builders.submit(api.w, "done-1", quota=api.train)
    Workload.objects.filter(pk=done.pk).update(phase=Phase.SUCCEEDED)

    def names(persona: str = "member", **params: Any) -> set[str]:
        body = api.call(persona, "get", URL, params).json()
        return {row["name"] for row in body["results"]}

    assert names(priority_min=9000) == {"hi-0", "hi-1", "hi-2"}
    assert names(phase="Succeeded") == {"done-1"}
    assert "done-1" not in names(phase=["Pending", "Backoff"])
    assert names(name="hi-1") == {"hi-1"}
    assert names(name_contains="HI-") == {"hi-0", "hi-1", "hi-2"}
    assert names(queue="team-a-train", phase="Succeeded") == {"done-1"}
    assert names(tenant="team-b") == set()  # not yours: nothing, not an error
    assert names("cluster_admin", tenant="team-b") == {"b-job-1"}
    assert names("cluster_admin", quota="team-b-train") == {"b-job-1"}


def test_ordering_and_pages(api: ApiWorld) -> None:
    for i in range(5):
        builders.submit(api.w, f"w-{i}", quota=api.train, priority=i)
    first = api.call("member", "get", URL, {"limit": 2}).json()
    assert first["count"] == 6
    assert [r["name"] for r in first["results"]] == ["w-4", "w-3"]  # newest first
    assert "offset=2" in first["next"]
    rest = api.call("member", "get", first["next"]).json()
    assert [r["name"] for r in rest["results"]] == ["w-2", "w-1"]
    by_priority = api.call("member", "get", URL, {"ordering": "-priority", "limit": 3}).json()
    assert [r["name"] for r in by_priority["results"]] == ["w-4", "w-3", "w-2"]
    too_many = api.call("member", "get", URL, {"limit": 5000})
    assert too_many.status_code == 400
    assert list(too_many.json()["fields"]) == ["limit"]


def test_list_rows_are_exactly_what_the_serializer_renders(api: ApiWorld) -> None:
    """The list's fast path (values, no model instances) must not drift from the serializer."""
    from rest_framework.test import APIRequestFactory

    from portal.api.serializers import WorkloadSerializer

    eta = timezone.now() + timedelta(minutes=5)
    Workload.objects.filter(pk=api.workload.pk).update(
        position=1, global_position=3, eta_p50=eta, eta_p90=eta, reason="short of cpu"
    )
    api.call("member", "post", URL, {
        "name": "rich", "queue": "team-a-train", "priority": 9100, "expected_runtime_s": 1.5,
        "labels": {"a": "b"}, "annotations": {"c": "d"},
        "pod_sets": [{"count": 3, "requests": {"cpu": "1500m", "memory": "3Gi", "nvidia.com/gpu": 2},
                      "node_selector": {"pool": "gpu"},
                      "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}],
    })  # fmt: skip
    listed = {row["id"]: row for row in api.call("cluster_admin", "get", URL).json()["results"]}
    request = APIRequestFactory().get(URL)
    for workload in Workload.objects.select_related("tenant", "quota", "queue", "submitted_by"):
        expected = WorkloadSerializer(workload, context={"request": request}).data
        assert listed[workload.pk] == dict(expected)


@pytest.mark.parametrize("amount", ["NaN", "Infinity", "8014417431962914339684352"])
def test_a_quantity_no_kubernetes_object_could_hold_is_a_400(api: ApiWorld, amount: str) -> None:
    """Found by the schemathesis run: "NaN" used to end in a 500."""
    before = Workload.objects.count()
    data = {"name": "odd", "queue": "team-a-train", "pod_sets": [{"requests": {"cpu": amount}}]}
    response = api.call("member", "post", URL, data)
    assert response.status_code == 400, response.json()
    assert Workload.objects.count() == before
