"""The simulated cluster's lifecycle, on an injected clock."""

from __future__ import annotations

import random

import pytest

from queueing.cluster import base
from queueing.cluster.base import JobNotFound, JobRequest
from queueing.cluster.simulated import SimulatedCluster
from queueing.models import SimJob
from tests.builders import Clock, node

pytestmark = pytest.mark.django_db


def request(name: str, runtime: float = 30) -> JobRequest:
    return JobRequest(
        namespace="ns",
        name=name,
        pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 1000}}],
        expected_runtime_s=runtime,
    )


def state_of(cluster: SimulatedCluster, name: str) -> str:
    return next(job.state for job in cluster.jobs() if job.ref.name == name)


def test_a_job_is_created_suspended_runs_for_its_runtime_and_succeeds():
    node("n1")
    clock = Clock()
    cluster = SimulatedCluster(clock=clock, failure_rate=0.0)
    ref = cluster.create_job(request("a", runtime=30))
    assert state_of(cluster, "a") == base.SUSPENDED
    cluster.tick(clock.advance(100))
    assert state_of(cluster, "a") == base.SUSPENDED  # suspended jobs do not run

    cluster.admit(ref, node_selector={})
    assert state_of(cluster, "a") == base.RUNNING
    cluster.tick(clock.advance(29))
    assert state_of(cluster, "a") == base.RUNNING
    cluster.tick(clock.advance(1))
    info = next(job for job in cluster.jobs() if job.ref.name == "a")
    assert info.state == base.SUCCEEDED
    assert (info.finished_at - info.started_at).total_seconds() == 30


def test_failures_follow_the_configured_rate():
    node("n1")
    clock = Clock()
    cluster = SimulatedCluster(clock=clock, failure_rate=1.0)
    ref = cluster.create_job(request("doomed", runtime=5))
    cluster.admit(ref, node_selector={})
    cluster.tick(clock.advance(5))
    assert state_of(cluster, "doomed") == base.FAILED


def test_failure_rate_is_statistical():
    node("n1")
    clock = Clock()
    cluster = SimulatedCluster(clock=clock, failure_rate=0.3, rng=random.Random(7))
    for i in range(200):
        cluster.admit(cluster.create_job(request(f"j{i}", runtime=1)), node_selector={})
    cluster.tick(clock.advance(2))
    failed = SimJob.objects.filter(state="Failed").count()
    assert 35 <= failed <= 85


def test_admit_is_idempotent():
    node("n1")
    cluster = SimulatedCluster(clock=Clock(), failure_rate=0.0)
    ref = cluster.create_job(request("once"))
    cluster.admit(ref, node_selector={})
    cluster.admit(ref, node_selector={})
    assert SimJob.objects.get(name="once").admissions == 1


def test_a_job_whose_selector_matches_no_node_waits_to_start():
    node("n1", labels={"koord-queue/pool": "cpu"})
    clock = Clock()
    cluster = SimulatedCluster(clock=clock, failure_rate=0.0)
    ref = cluster.create_job(request("gpu-job"))
    cluster.admit(ref, node_selector={"koord-queue/pool": "gpu"})
    assert state_of(cluster, "gpu-job") == base.STARTING
    node("n2", labels={"koord-queue/pool": "gpu"})
    cluster.tick(clock.advance(1))
    assert state_of(cluster, "gpu-job") == base.RUNNING


def test_suspend_stops_a_running_job_and_delete_is_idempotent():
    node("n1")
    clock = Clock()
    cluster = SimulatedCluster(clock=clock, failure_rate=0.0)
    ref = cluster.create_job(request("b"))
    cluster.admit(ref, node_selector={})
    cluster.suspend(ref)
    assert state_of(cluster, "b") == base.SUSPENDED
    cluster.suspend(ref)  # again: fine
    cluster.delete(ref)
    cluster.delete(ref)
    assert not SimJob.objects.filter(name="b").exists()
    with pytest.raises(JobNotFound):
        cluster.admit(ref, node_selector={})


def test_nodes_report_allocatable_reserved_labels_and_taints():
    node(
        "gpu-1",
        alloc={"nvidia.com/gpu": "8"},
        reserved={"cpu": "1"},
        labels={"pool": "gpu"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    [info] = SimulatedCluster().nodes()
    assert info.allocatable["nvidia.com/gpu"] == 8
    assert info.reserved == {"cpu": 1000}
    assert info.labels == {"pool": "gpu"}
    assert info.taints[0]["effect"] == "NoSchedule"
