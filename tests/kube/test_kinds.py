"""JobSet, RayJob, PyTorchJob, TFJob, MPIJob and TrainJob through the same adapter interface.

The fake stores these kinds and logs their suspend flips, but runs none of them: tests
write their status through the /status subresource, as their controllers would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from queueing.admission import tick
from queueing.choices import Phase
from queueing.cluster.base import FAILED, RUNNING, SUCCEEDED, SUSPENDED
from queueing.cluster.kubernetes import KINDS, KubernetesCluster
from queueing.models import Workload
from tests.fakekube import FakeKube, unsuspend_counts
from tests.kube.conftest import POOL_LABEL, make_adapter
from tests.kube.test_kube_cycle import build_world

CPU = {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}


def pod(**extra: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "busybox", **CPU}], **extra}}


def jobset(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "leader",
                    "replicas": 1,
                    "template": {"spec": {"parallelism": 1, "completions": 1, "template": pod()}},
                },
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 3, "completions": 3, "template": pod()}},
                },
            ],
        },
    }


def rayjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "shutdownAfterJobFinishes": True,  # KubeRay suspends only such RayJobs
            "entrypoint": "python job.py",
            "submitterPodTemplate": pod(),  # `ray job submit` runs in a pod of this shape
            "rayClusterSpec": {
                "headGroupSpec": {"template": pod()},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": pod()}],
            },
        },
    }


def kubeflow(kind: str, name: str) -> dict[str, Any]:
    field, (first, second) = {
        "PyTorchJob": ("pytorchReplicaSpecs", ("Master", "Worker")),
        "TFJob": ("tfReplicaSpecs", ("Chief", "Worker")),
    }[kind]
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"suspend": True},
            field: {
                first: {"replicas": 1, "template": pod()},
                second: {"replicas": 3, "template": pod()},
            },
        },
    }


def mpijob(name: str) -> dict[str, Any]:
    """An MPIJob of the MPI Operator v2 (``kubeflow.org/v2beta1``): held by
    ``runPolicy.suspend``, a launcher and its workers."""
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"suspend": True},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": pod()},
                "Worker": {"replicas": 3, "template": pod()},
            },
        },
    }


def trainjob(name: str) -> dict[str, Any]:
    """A Kubeflow Trainer TrainJob: held by ``spec.suspend``, ``numNodes`` trainer pods."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 3, "resourcesPerNode": CPU["resources"]},
        },
    }


# kind -> (manifest, plural, pod sets (name, count), running status, succeeded status)
CASES: dict[str, tuple[Callable[[str], dict[str, Any]], str, list[tuple[str, int]], dict, dict]] = {
    "JobSet": (
        jobset,
        "jobsets",
        [("leader", 1), ("workers", 6)],
        {"replicatedJobsStatus": [{"name": "workers", "active": 2, "ready": 2}]},
        {
            "conditions": [
                {
                    "type": "Completed",
                    "status": "True",
                    "lastTransitionTime": "2026-01-05T09:00:00Z",
                }
            ]
        },
    ),
    "RayJob": (
        rayjob,
        "rayjobs",
        [("head", 1), ("gpu", 2), ("submitter", 1)],
        {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "rayClusterName": "rc-1"},
        {
            "jobDeploymentStatus": "Complete",
            "jobStatus": "SUCCEEDED",
            "endTime": "2026-01-05T09:00:00Z",
        },
    ),
    "PyTorchJob": (
        lambda n: kubeflow("PyTorchJob", n),
        "pytorchjobs",
        [("master", 1), ("worker", 3)],
        {
            "conditions": [{"type": "Running", "status": "True"}],
            "replicaStatuses": {"Worker": {"active": 3}},
        },
        {"conditions": [{"type": "Succeeded", "status": "True"}]},
    ),
    "TFJob": (
        lambda n: kubeflow("TFJob", n),
        "tfjobs",
        [("chief", 1), ("worker", 3)],
        {
            "conditions": [{"type": "Running", "status": "True"}],
            "replicaStatuses": {"Worker": {"active": 3}},
        },
        {"conditions": [{"type": "Failed", "status": "True", "message": "OOM"}]},
    ),
    "MPIJob": (
        mpijob,
        "mpijobs",
        [("launcher", 1), ("worker", 3)],
        {
            "conditions": [{"type": "Running", "status": "True"}],
            "replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 3}},
        },
        {"conditions": [{"type": "Succeeded", "status": "True"}]},
    ),
    "TrainJob": (
        trainjob,
        "trainjobs",
        [("node", 3)],
        {"jobsStatus": [{"name": "node", "active": 3, "ready": 3}]},
        {"conditions": [{"type": "Complete", "status": "True"}]},
    ),
}


def write_status(cluster: KubernetesCluster, kind: str, name: str, status: dict[str, Any]) -> None:
    path = KINDS[kind].path("team-a", name, "status")
    cluster.rest.call(
        "patch", "PATCH", path, body={"status": status}, content_type="application/merge-patch+json"
    )


def seen(cluster: KubernetesCluster, name: str):
    cluster.tick()
    return next(j for j in cluster.jobs() if j.ref.name == name)


@pytest.mark.parametrize("kind", list(CASES))
def test_each_kind_is_read_admitted_and_suspended(kind: str, fake: FakeKube):
    fake.add_namespace("team-a")
    manifest, plural, pod_sets, running, done = CASES[kind]
    cluster = make_adapter(fake.url)
    fake.create(plural, manifest("x"), "team-a")
    job = seen(cluster, "x")
    assert job.ref.kind == kind
    assert (job.state, job.suspended) == (SUSPENDED, True)
    assert [(ps["name"], ps["count"]) for ps in job.pod_sets] == pod_sets
    assert all(ps["requests"] == {"cpu": 1000, "memory": 2**30} for ps in job.pod_sets)

    cluster.admit(job.ref, node_selector={POOL_LABEL: "a"})
    cluster.admit(job.ref, node_selector={POOL_LABEL: "a"})
    obj = cluster.rest.call("get", "GET", KINDS[kind].path("team-a", "x"))
    assert not KINDS[kind].is_suspended(obj)
    assert KINDS[kind].selector_holds(obj, {POOL_LABEL: "a"})
    if kind != "TrainJob":  # a TrainJob's pods take it from spec.podSpecOverrides
        assert all(t.spec["nodeSelector"] == {POOL_LABEL: "a"} for t in KINDS[kind].templates(obj))
    else:
        [override] = obj["spec"]["podSpecOverrides"]
        assert override == {"targetJobs": [{"name": "node"}], "nodeSelector": {POOL_LABEL: "a"}}
    assert list(unsuspend_counts(fake.log_entries()).values()) == [1]

    write_status(cluster, kind, "x", running)
    assert seen(cluster, "x").state == RUNNING
    cluster.suspend(job.ref)
    cluster.suspend(job.ref)
    assert seen(cluster, "x").suspended
    cluster.admit(job.ref, node_selector={POOL_LABEL: "a"})
    write_status(cluster, kind, "x", done)
    finished = seen(cluster, "x")
    assert finished.state == (FAILED if kind == "TFJob" else SUCCEEDED)
    cluster.delete(job.ref)
    cluster.delete(job.ref)
    cluster.tick()
    assert "x" not in {j.ref.name for j in cluster.jobs()}


@pytest.mark.django_db
def test_a_jobset_goes_through_the_cycle(fake: FakeKube, use_cluster: Callable[[Any], None]):
    cluster = make_adapter(fake.url, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    build_world(fake, cluster)
    fake.create("jobsets", jobset("js"), "team-a")
    summary = tick(cluster=cluster)
    workload = Workload.objects.get(name="js")
    assert (workload.kind, workload.api_version) == ("JobSet", "jobset.x-k8s.io/v1alpha2")
    assert summary.admitted == 1
    assert workload.total_request["cpu"] == 7000
    write_status(cluster, "JobSet", "js", CASES["JobSet"][3])
    tick(cluster=cluster)
    workload.refresh_from_db()
    assert workload.phase == Phase.RUNNING
    write_status(cluster, "JobSet", "js", CASES["JobSet"][4])
    tick(cluster=cluster)
    workload.refresh_from_db()
    assert workload.phase == Phase.SUCCEEDED


def test_a_kind_without_its_crd_is_skipped(fake_kube_factory: Callable[..., FakeKube]):
    from tests.fakekube.resources import BUILTIN

    fake = fake_kube_factory()
    # A server without the JobSet CRD: drop it from the registry.
    fake.registry._types = {k: v for k, v in fake.registry._types.items() if v.kind != "JobSet"}
    assert BUILTIN
    cluster = make_adapter(fake.url)
    cluster.tick()
    assert cluster.jobs() == []
    assert "JobSet" in cluster.reader.absent_kinds
