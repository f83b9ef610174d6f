"""The job kinds as plain dict code: no API server, no database, literal objects in."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from queueing.cluster.base import FAILED, RUNNING, STARTING, SUCCEEDED, SUSPENDED
from queueing.cluster.kubernetes.kinds import (
    KINDS,
    deep_merge,
    node_info,
    pod_is_managed,
    pod_requests,
)
from queueing.quantities import QuantityError

POD = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}


def job(**spec: Any) -> dict[str, Any]:
    base = {"suspend": True, "parallelism": 2, "completions": 4, "template": {"spec": POD}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"namespace": "ns", "name": "j", "uid": "u-1"},
        "spec": {**base, **spec},
    }


def test_a_batch_job_counts_the_pods_that_run_at_once() -> None:
    kind = KINDS["Job"]
    [template] = kind.templates(job())
    assert (template.name, template.count) == ("main", 2)
    assert kind.templates(job(parallelism=8, completions=3))[0].count == 3
    assert kind.templates(job(parallelism=None, completions=None))[0].count == 1


def test_a_batch_job_reads_its_status() -> None:
    kind = KINDS["Job"]
    assert kind.observe(job()).state == SUSPENDED
    running = job(suspend=False)
    running["status"] = {"active": 2, "ready": 1, "startTime": "2026-01-01T00:00:00Z"}
    seen = kind.observe(running)
    assert (seen.state, seen.active, seen.started_at) == (
        RUNNING,
        2,
        datetime(2026, 1, 1, tzinfo=UTC),
    )
    running["status"]["ready"] = 0
    assert kind.observe(running).state == STARTING
    failed = job(suspend=False)
    failed["status"] = {
        "conditions": [
            {"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"},
            {"type": "Complete", "status": "False"},
        ]
    }
    seen = kind.observe(failed)
    assert (seen.state, seen.message) == (FAILED, "BackoffLimitExceeded")
    done = job(suspend=False)
    done["status"] = {
        "completionTime": "2026-01-01T00:05:00Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    seen = kind.observe(done)
    assert (seen.state, seen.finished_at) == (SUCCEEDED, datetime(2026, 1, 1, 0, 5, tzinfo=UTC))


def test_suspend_patches_sit_where_each_kind_keeps_its_flag() -> None:
    assert KINDS["Job"].suspend_patch(False) == {"spec": {"suspend": False}}
    assert KINDS["PyTorchJob"].suspend_patch(True) == {"spec": {"runPolicy": {"suspend": True}}}
    body: dict[str, Any] = {"spec": {}}
    KINDS["TFJob"].set_suspended(body)
    assert body == {"spec": {"runPolicy": {"suspend": True}}}
    assert KINDS["TFJob"].is_suspended(body)


def test_a_selector_patch_pins_every_template_and_holds_afterwards() -> None:
    kind = KINDS["JobSet"]
    obj = {
        "metadata": {"resourceVersion": "7"},
        "spec": {
            "replicatedJobs": [
                {"name": "a", "replicas": 2, "template": {"spec": {"template": {"spec": POD}}}},
                {"name": "b", "template": {"spec": {"parallelism": 3, "template": {"spec": POD}}}},
            ]
        },
    }
    selector = {"pool": "gpu"}
    assert not kind.selector_holds(obj, selector)
    patch = kind.selector_patch(obj, selector)
    assert patch["metadata"] == {"resourceVersion": "7"}  # a list goes back whole, guarded
    patched = deep_merge(obj, patch)
    assert kind.selector_holds(patched, selector)
    assert [(t.name, t.count) for t in kind.templates(patched)] == [("a", 2), ("b", 3)]
    assert "nodeSelector" not in POD  # the original is untouched


def test_a_kubeflow_job_reads_replicas_priority_and_deadline() -> None:
    kind = KINDS["PyTorchJob"]
    obj = {
        "spec": {
            "runPolicy": {
                "suspend": True,
                "activeDeadlineSeconds": 600,
                "schedulingPolicy": {"priorityClass": "high"},
            },
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": POD}},
                "Worker": {"replicas": 3, "template": {"spec": POD}},
                "Idle": {"replicas": 0, "template": {"spec": POD}},
            },
        }
    }
    assert [(t.name, t.count) for t in kind.templates(obj)] == [("master", 1), ("worker", 3)]
    assert kind.priority_class(obj) == "high"
    assert kind.active_deadline(obj) == 600.0
    assert kind.selector_patch(obj, {"p": "1"})["spec"]["pytorchReplicaSpecs"].keys() == {
        "Master",
        "Worker",
        "Idle",
    }


def test_a_rayjob_counts_its_head_and_workers() -> None:
    kind = KINDS["RayJob"]
    obj = {
        "spec": {
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": POD}},
                "workerGroupSpecs": [
                    {"groupName": "w", "replicas": 2, "numOfHosts": 2, "template": {"spec": POD}},
                    {"groupName": "none", "replicas": 0, "template": {"spec": POD}},
                ],
            }
        }
    }
    assert [(t.name, t.count) for t in kind.templates(obj)] == [
        ("head", 1),
        ("w", 4),
        ("submitter", 1),
    ]


def test_pod_requests_count_as_the_scheduler_does() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}},
            {"resources": {"requests": {"cpu": "250m"}}},
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "3"}}},  # runs alone, before
            {"restartPolicy": "Always", "resources": {"requests": {"memory": "1Gi"}}},  # sidecar
        ],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(spec) == {"cpu": 3100, "memory": 3 * 1024**3}
    with pytest.raises(QuantityError):
        pod_requests({"containers": [{"resources": {"requests": {"cpu": "lots"}}}]})


def test_pods_of_managed_jobs_are_not_reserved_capacity() -> None:
    def pod_of(uid: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return {
            "metadata": {
                "namespace": "ns",
                "labels": labels or {},
                "ownerReferences": [{"uid": uid, "controller": True}],
            }
        }

    managed, owners, rays = {"js-1"}, {"job-1": "js-1"}, {("ns", "ray-a")}
    assert pod_is_managed(pod_of("js-1"), managed, owners, rays)
    assert pod_is_managed(pod_of("job-1"), managed, owners, rays)  # a JobSet's child Job
    assert pod_is_managed(pod_of("rc", {"ray.io/cluster": "ray-a"}), managed, owners, rays)
    assert not pod_is_managed(pod_of("other"), managed, owners, rays)


def test_a_node_that_is_not_ready_is_unschedulable() -> None:
    node = {
        "metadata": {"name": "n1", "labels": {"pool": "a"}},
        "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "weird": "not-a-number"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    info = node_info(node, {"cpu": 1000})
    assert (info.allocatable["cpu"], info.reserved, info.unschedulable) == (
        4000,
        {"cpu": 1000},
        False,
    )
    assert "weird" not in info.allocatable
    assert info.taints == [{"key": "gpu", "value": "", "effect": "NoSchedule"}]
    node["status"]["conditions"][0]["status"] = "False"
    assert node_info(node, {}).unschedulable


def test_a_rayjob_counts_its_submitter_pod_as_kuberay_runs_it() -> None:
    kind = KINDS["RayJob"]
    cluster = {"headGroupSpec": {"template": {"spec": POD}}, "workerGroupSpecs": []}
    default = kind.templates({"spec": {"rayClusterSpec": cluster}})
    submitter = default[-1]
    assert (submitter.name, submitter.count) == ("submitter", 1)
    assert pod_requests(submitter.spec) == {"cpu": 500, "memory": 200 * 2**20}
    own = {"containers": [{"resources": {"requests": {"cpu": "2"}}}]}
    custom = kind.templates(
        {"spec": {"rayClusterSpec": cluster, "submitterPodTemplate": {"spec": own}}}
    )
    assert pod_requests(custom[-1].spec) == {"cpu": 2000}
    http = kind.templates({"spec": {"rayClusterSpec": cluster, "submissionMode": "HTTPMode"}})
    assert [t.name for t in http] == ["head"]  # no submitter pod in HTTP mode


def test_a_rayjob_kuberay_cannot_suspend_is_refused_with_a_reason() -> None:
    kind = KINDS["RayJob"]
    assert "clusterSelector" in kind.refusal({"spec": {"clusterSelector": {"a": "b"}}})
    assert "shutdownAfterJobFinishes" in kind.refusal({"spec": {}})
    assert kind.refusal({"spec": {"shutdownAfterJobFinishes": True}}) == ""
    assert KINDS["Job"].refusal(job()) == ""


def test_an_mpijob_v2beta1_suspends_under_run_policy() -> None:
    kind = KINDS["MPIJob"]
    assert (kind.api_version, kind.plural) == ("kubeflow.org/v2beta1", "mpijobs")
    obj = {
        "spec": {
            "runPolicy": {"suspend": True},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": POD}},
                "Worker": {"replicas": 4, "template": {"spec": POD}},
            },
        }
    }
    assert [(t.name, t.count) for t in kind.templates(obj)] == [("launcher", 1), ("worker", 4)]
    assert kind.observe(obj).state == SUSPENDED
    assert kind.suspend_patch(False) == {"spec": {"runPolicy": {"suspend": False}}}
    obj["spec"]["runPolicy"]["suspend"] = False
    obj["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    assert kind.observe(obj).state == SUCCEEDED


def test_a_trainjob_counts_its_trainer_nodes_and_pins_them_by_override() -> None:
    kind = KINDS["TrainJob"]
    obj: dict[str, Any] = {
        "metadata": {"resourceVersion": "3"},
        "spec": {
            "suspend": True,
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 3, "resourcesPerNode": {"requests": {"nvidia.com/gpu": 2}}},
            "podSpecOverrides": [
                {"targetJobs": [{"name": "initializer"}], "serviceAccountName": "x"}
            ],
        },
    }
    [nodes] = kind.templates(obj)
    assert (nodes.name, nodes.count, pod_requests(nodes.spec)) == ("node", 3, {"nvidia.com/gpu": 2})
    assert kind.observe(obj).state == SUSPENDED
    selector = {"pool": "gpu"}
    assert not kind.selector_holds(obj, selector)
    patched = deep_merge(obj, kind.selector_patch(obj, selector))
    assert kind.selector_holds(patched, selector)
    overrides = patched["spec"]["podSpecOverrides"]
    assert overrides[0] == {"targetJobs": [{"name": "initializer"}], "serviceAccountName": "x"}
    assert overrides[1] == {"targetJobs": [{"name": "node"}], "nodeSelector": {"pool": "gpu"}}
    patched["spec"]["suspend"] = False
    patched["status"] = {"jobsStatus": [{"name": "node", "active": 3, "ready": 3}]}
    assert (kind.observe(patched).state, kind.observe(patched).active) == (RUNNING, 3)
    patched["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    assert kind.observe(patched).state == SUCCEEDED


def test_a_refused_rayjob_reads_with_no_pod_sets_and_its_reason() -> None:
    from queueing.cluster.kubernetes.reader import job_info

    obj = {
        "metadata": {"namespace": "ns", "name": "r", "uid": "u"},
        "spec": {"suspend": True, "clusterSelector": {"ray.io/cluster": "shared"}},
    }
    info = job_info(KINDS["RayJob"], obj, {}, {}, {})
    # The sync reports a job without pod sets unplaced, with this message.
    assert info.pod_sets == []
    assert "spec.clusterSelector" in info.message
