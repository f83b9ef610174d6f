"""The real cycle (sync + engine + apply) driving the fake cluster through the adapter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from queueing import actions, compat
from queueing.admission import tick
from queueing.choices import Phase
from queueing.cluster.kubernetes import KubernetesCluster, RetryPolicy
from queueing.models import MetricCounter, Queue, Quota, Workload, WorkloadEvent
from tests.builders import SYSTEM
from tests.fakekube import (
    RUNTIME_ANNOTATION,
    FakeKube,
    FaultSpec,
    admitted_timeline,
    api_client,
    by_label,
    overruns,
    unsuspend_counts,
    usage_timeline,
)
from tests.kube.conftest import FAST, ApiErrors, job_manifest, make_adapter
from tests.services import wait_until

pytestmark = pytest.mark.django_db


@dataclass
class KubeWorld:
    fake: FakeKube
    cluster: KubernetesCluster
    quota_a: Quota
    quota_b: Quota

    def submit(
        self, name: str, *, cpu: str = "4", count: int = 1, runtime: float = 30, **kw: Any
    ) -> Workload:
        return actions.submit_workload(
            SYSTEM,
            tenant=None,
            quota=kw.pop("quota", self.quota_a),
            name=name,
            pod_sets=[{"count": count, "requests": {"cpu": cpu, "memory": "1Gi"}}],
            expected_runtime_s=runtime,
            annotations={RUNTIME_ANNOTATION: str(runtime)},
            **kw,
        )

    def tick_until(self, check: Callable[[], Any], timeout: float = 30, **kw: Any) -> Any:
        def step() -> Any:
            tick(cluster=self.cluster, **kw)
            return check()

        return wait_until(step, timeout=timeout, interval=0.02)

    def phases(self) -> dict[str, str]:
        return dict(Workload.objects.values_list("name", "phase"))


def build_world(fake: FakeKube, cluster: KubernetesCluster) -> KubeWorld:
    for namespace in ("team-a", "team-b"):
        fake.add_namespace(namespace)
    fake.add_node("node-1", {"cpu": "8", "memory": "32Gi"})
    fake.add_node("node-2", {"cpu": "8", "memory": "32Gi"})
    root = actions.create_quota(
        SYSTEM,
        name="cluster",
        tenant=None,
        parent=None,
        min={"cpu": "16", "memory": "64Gi"},
        max={"cpu": "16", "memory": "64Gi"},
    )
    quotas = []
    for team in ("team-a", "team-b"):
        tenant = actions.create_tenant(SYSTEM, name=team)
        quotas.append(
            actions.create_quota(
                SYSTEM,
                name=f"{team}-q",
                tenant=tenant,
                parent=root,
                min={"cpu": "8"},
                max={"cpu": "16"},
                namespaces=[team],
            )
        )
    return KubeWorld(fake, cluster, quotas[0], quotas[1])


@pytest.fixture
def world(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> Iterator[KubeWorld]:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    yield build_world(fake, cluster)
    cluster.api.close()


def quota_limits() -> dict[str, dict[str, float]]:
    """Each quota's max in cores, keyed as the job label names it."""
    return {
        q.name: {"cpu": q.max["cpu"] / 1000}
        for q in Quota.objects.exclude(parent=None)
        if "cpu" in q.max
    }


def assert_no_overrun(entries: list[dict[str, Any]]) -> None:
    limits = quota_limits()
    by_quota = by_label(compat.QUOTA_LABEL)
    assert overruns(admitted_timeline(entries, by_quota), limits) == []
    assert overruns(usage_timeline(entries, by_quota), limits) == []
    root = {None: {"cpu": 16.0}}
    assert overruns(admitted_timeline(entries, lambda e: None), root) == []


def test_jobs_are_admitted_within_quota_run_and_free_it(world: KubeWorld):
    for i in range(6):
        world.submit(f"w{i}", cpu="4", runtime=30)
    summary = tick(cluster=world.cluster)
    assert summary.admitted == 4  # 16 cpu of quota, 2 nodes of 8
    assert sum(1 for e in world.fake.log_entries(types=["suspend"]) if not e["suspend"]) == 4
    world.tick_until(lambda: set(world.phases().values()) == {Phase.SUCCEEDED})
    entries = world.fake.log_entries()
    assert set(unsuspend_counts(entries).values()) == {1}
    assert_no_overrun(entries)
    assert all(w.started_at and w.finished_at for w in Workload.objects.all())


def test_preemption_suspends_the_lower_priority_job(world: KubeWorld):
    low = [world.submit(f"low-{i}", cpu="8", runtime=600, priority=1) for i in range(2)]
    world.tick_until(lambda: {world.phases()[w.name] for w in low} == {Phase.RUNNING})
    high = world.submit("high", cpu="8", runtime=600, priority=100)
    world.tick_until(lambda: world.phases()["high"] == Phase.RUNNING)
    phases = world.phases()
    victims = [w for w in low if phases[w.name] in (Phase.PENDING, Phase.BACKOFF)]
    assert len(victims) == 1
    suspended = [
        e
        for e in world.fake.log_entries(types=["suspend"])
        if e["object"] == f"team-a/{victims[0].name}" and e["suspend"] and e["previous"] is False
    ]
    assert len(suspended) == 1
    assert world.cluster.jobs()
    assert next(j for j in world.cluster.jobs() if j.ref.name == victims[0].name).suspended
    assert high.pk
    assert_no_overrun(world.fake.log_entries())


def test_kube_queue_jobs_are_taken_over(world: KubeWorld):
    batch = actions.create_queue(SYSTEM, tenant=world.quota_a.tenant, name="team-a-batch")
    # kubectl apply of kube-queue manifests: nothing suspended them yet.
    world.fake.create(
        "jobs",
        job_manifest(
            "kq-annotated",
            suspend=False,
            runtime=600,
            annotations={compat.SUSPEND_ANNOTATION: "true", "kube-queue/priority": "7"},
        ),
        "team-b",
    )
    world.fake.create(
        "jobs",
        job_manifest(
            "alibaba",
            labels={"alibabacloud.com/quota-name": "team-a-q"},
            cpu="2",
        ),
        "team-b",
    )
    world.fake.create(
        "jobs",
        job_manifest(
            "queued",
            annotations={"kube-queue/queue-name": "team-a-batch"},
            cpu="2",
        ),
        "team-a",
    )
    tick(cluster=world.cluster)
    annotated = Workload.objects.get(name="kq-annotated")
    assert (annotated.quota, annotated.priority) == (world.quota_b, 7)
    assert Workload.objects.get(name="alibaba").quota == world.quota_a
    assert Workload.objects.get(name="queued").queue == batch
    # The job that ran behind the queue's back was suspended, then admitted once by the cycle.
    flips = [
        e["suspend"]
        for e in world.fake.log_entries(types=["suspend"])
        if e["object"] == "team-b/kq-annotated"
    ]
    assert flips[:2] == [False, True]
    world.tick_until(lambda: world.phases()["kq-annotated"] == Phase.RUNNING)
    assert [
        e["suspend"]
        for e in world.fake.log_entries(types=["suspend"])
        if e["object"] == "team-b/kq-annotated"
    ] == [False, True, False]


def test_a_deleted_job_cancels_its_workload(world: KubeWorld):
    workload = world.submit("gone", runtime=600)
    world.tick_until(lambda: world.phases()["gone"] == Phase.RUNNING)
    world.fake.store.delete("jobs", "team-a", "gone")
    later = timezone.now() + timedelta(minutes=5)  # past the grace for fresh workloads
    tick(cluster=world.cluster, now=later)
    workload.refresh_from_db()
    assert workload.phase == Phase.CANCELLED


def test_cancelling_deletes_the_job(world: KubeWorld):
    workload = world.submit("unwanted", runtime=600)
    actions.cancel_workload(SYSTEM, workload)
    world.cluster.tick()
    assert "unwanted" not in {j.ref.name for j in world.cluster.jobs()}
    assert any(e["type"] == "deleted" for e in world.fake.log_entries())


def test_a_lost_admit_is_repeated_by_the_next_sync(world: KubeWorld):
    workload = world.submit("orphan", runtime=30)
    # What apply() commits before its cluster call; the worker died right there.
    Workload.objects.filter(pk=workload.pk).update(phase=Phase.ADMITTED, admitted_at=timezone.now())
    summary = tick(cluster=world.cluster)
    assert summary.sync["readmitted"] == 1
    world.tick_until(lambda: world.phases()["orphan"] == Phase.SUCCEEDED)
    assert list(unsuspend_counts(world.fake.log_entries()).values()) == [1]


def test_api_faults_leave_database_and_cluster_in_agreement(
    world: KubeWorld, api_errors: ApiErrors
):
    world.fake.set_faults(
        {
            "*": FaultSpec(
                error_rate=0.1, codes=(500, 503, 409, 429), retry_after=0.01, committed_rate=0.5
            )
        },
        seed=11,
    )
    for i in range(16):
        world.submit(f"f{i}", cpu="2", runtime=20, quota=world.quota_a if i % 2 else world.quota_b)
    world.tick_until(lambda: set(world.phases().values()) == {Phase.SUCCEEDED}, timeout=60)
    world.fake.clear_faults()
    entries = world.fake.log_entries()
    admissions = Counter(
        WorkloadEvent.objects.filter(to_phase=Phase.ADMITTED).values_list(
            "workload__object_uid", flat=True
        )
    )
    assert unsuspend_counts(entries) == admissions
    assert_no_overrun(entries)
    assert world.fake.state()["faultsInjected"] > 10
    assert api_errors.seen


def test_api_errors_are_counted_for_metrics(fake: FakeKube, use_cluster: Callable[[Any], None]):
    # The default error hook: a shared counter that /metrics shows.
    cluster = KubernetesCluster(api_client(fake.url, retries=False), policy=FAST)
    use_cluster(cluster)
    world = build_world(fake, cluster)
    world.submit("counted", runtime=5)
    fake.set_faults(patch=FaultSpec(error_rate=1.0, codes=(503,)))
    cluster.rest.policy = RetryPolicy(budget_s=0.05, base_s=0.001, cap_s=0.01)
    summary = tick(cluster=cluster)
    assert summary.errors  # the admit could not be done; the next sync repeats it
    counters = dict(
        MetricCounter.objects.filter(name="cluster_api_error").values_list("label", "value")
    )
    assert counters.get("patch 503", 0) >= 1
    fake.clear_faults()
    cluster.rest.policy = FAST
    world.tick_until(lambda: world.phases()["counted"] in (Phase.RUNNING, Phase.SUCCEEDED))


def test_queue_units_are_read_and_mirrored(fake: FakeKube, use_cluster: Callable[[Any], None]):
    cluster = make_adapter(fake.url, namespaces=["team-a", "team-b"], mirror_queue_units=True)
    use_cluster(cluster)
    world = build_world(fake, cluster)
    batch = actions.create_queue(SYSTEM, tenant=world.quota_a.tenant, name="team-a-batch")
    # kube-queue made a QueueUnit for a job it suspended; its queue and priority count.
    fake.create("jobs", job_manifest("legacy", runtime=5), "team-a")
    fake.create(
        "queueunits",
        {
            "metadata": {"name": "legacy-job"},
            "spec": {
                "consumerRef": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "legacy",
                    "namespace": "team-a",
                },
                "queue": "team-a-batch",
                "priority": 42,
            },
        },
        "team-a",
    )
    world.submit("fresh", runtime=5)
    with override_settings(KQ_MIRROR_QUEUEUNITS=True):
        world.tick_until(lambda: set(world.phases().values()) == {Phase.SUCCEEDED})
        tick(cluster=cluster)
    legacy = Workload.objects.get(name="legacy")
    assert (legacy.queue, legacy.priority) == (batch, 42)
    units = {
        u["metadata"]["name"]: u
        for u in cluster.list_objects("scheduling.x-k8s.io", "v1alpha1", "queueunits")
    }
    assert units["legacy-job"]["status"]["phase"] == "Succeed"
    # Made for it, named as koord-queue names a batch Job's unit: the Job's own name.
    assert units["fresh"]["status"]["phase"] == "Succeed"
    assert units["fresh"]["spec"]["consumerRef"]["name"] == "fresh"
    assert Queue.objects.filter(name="team-a-batch").exists()


@pytest.fixture
def cached_world(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> Iterator[KubeWorld]:
    """The world with the watch cache on: syncs between full ones are incremental."""
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"], watch_cache=True)
    use_cluster(cluster)
    yield build_world(fake, cluster)
    cluster.stop_watching()
    cluster.api.close()


def test_with_the_watch_cache_jobs_are_admitted_run_and_free_their_quota(
    cached_world: KubeWorld,
):
    world = cached_world
    for i in range(6):
        world.submit(f"w{i}", cpu="4", runtime=30)
    first = tick(cluster=world.cluster)
    assert first.admitted == 4
    assert first.sync["incremental"] is False  # the first sync of a process is full
    reports = []
    world.tick_until(
        lambda: (
            reports.append(tick(cluster=world.cluster).sync)
            or set(world.phases().values()) == {Phase.SUCCEEDED}
        )
    )
    assert any(r["incremental"] for r in reports)
    entries = world.fake.log_entries()
    assert set(unsuspend_counts(entries).values()) == {1}
    assert_no_overrun(entries)


def test_an_incremental_sync_registers_new_jobs_and_cancels_deleted_ones(
    cached_world: KubeWorld,
):
    world = cached_world
    kept = world.submit("kept", cpu="1", runtime=600)
    tick(cluster=world.cluster)  # full
    world.fake.create(
        "jobs",
        job_manifest("applied", labels={compat.QUOTA_LABEL: "team-a-q"}, runtime=600),
        "team-a",
    )
    world.fake.store.delete("jobs", "team-a", "kept")
    Workload.objects.filter(pk=kept.pk).update(created_at=timezone.now() - timedelta(minutes=5))

    def settled() -> bool:
        report = tick(cluster=world.cluster).sync
        phases = world.phases()
        return (
            report["incremental"]
            and phases.get("applied") is not None
            and phases["kept"] == Phase.CANCELLED
        )

    world.tick_until(settled)
