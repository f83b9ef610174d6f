"""The Kubernetes adapter against the fake API server (and a real cluster, opt-in)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from queueing import compat
from queueing.cluster.base import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    ClusterError,
    JobNotFound,
    JobRef,
    JobRequest,
)
from queueing.cluster.kubernetes import (
    WRITE_ROUNDS_AT_ONCE,
    KubernetesCluster,
    RetryPolicy,
    connect,
    pod_requests,
)
from queueing.cluster.kubernetes.client import TOKEN_CHECK_S, ThrottledRefresh
from tests.fakekube import (
    RUNTIME_ANNOTATION,
    FakeKube,
    FaultSpec,
    unsuspend_counts,
    write_kubeconfig,
)
from tests.kube.conftest import POOL_LABEL, ApiErrors, Kube, job_manifest, make_adapter
from tests.services import wait_until

GI = 2**30


def request(name: str, *, cpu: int = 1000, count: int = 1, **extra) -> JobRequest:
    """A job as submit_workload asks for it; the fake runs it for its expected runtime."""
    runtime = extra.get("expected_runtime_s")
    return JobRequest(
        namespace=extra.pop("namespace", "team-a"),
        name=name,
        pod_sets=[{"name": "main", "count": count, "requests": {"cpu": cpu, "memory": GI}}],
        labels={compat.QUEUE_LABEL: "team-a"},
        annotations={RUNTIME_ANNOTATION: str(runtime)} if runtime else {},
        **extra,
    )


def info(cluster: KubernetesCluster, name: str):
    cluster.tick()
    return next(j for j in cluster.jobs() if j.ref.name == name)


# --- creating ----------------------------------------------------------------------------


def test_create_job_builds_a_suspended_job_from_its_pod_set(kube: Kube):
    ref = kube.cluster.create_job(request("one", count=3, cpu=500, expected_runtime_s=2))
    job = kube.job("one")
    assert job["spec"]["suspend"] is True
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 3
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert job["metadata"]["labels"][compat.QUEUE_LABEL] == "team-a"
    assert compat.CREATE_ID_LABEL in job["metadata"]["labels"]
    assert ref.uid == job["metadata"]["uid"]

    seen = info(kube.cluster, "one")
    assert seen.state == SUSPENDED
    assert seen.suspended
    assert seen.pod_sets == [
        {
            "name": "main",
            "count": 3,
            "requests": {"cpu": 500, "memory": GI},
            "node_selector": {},
            "tolerations": [],
        }
    ]
    assert seen.expected_runtime_s == 2


def test_create_job_from_a_pod_template_or_a_job_manifest(kube: Kube):
    template = {
        "metadata": {"labels": {"app": "x"}},
        "spec": job_manifest()["spec"]["template"]["spec"],
    }
    kube.cluster.create_job(
        JobRequest(
            namespace=kube.namespace,
            name="from-template",
            pod_sets=[{"count": 1, "requests": {"cpu": 1000, "memory": 64 * 2**20}}],
            manifest=template,
        )
    )
    assert kube.job("from-template")["spec"]["suspend"] is True

    manifest = job_manifest(parallelism=2, suspend=False)
    ref = kube.cluster.create_job(
        JobRequest(
            namespace=kube.namespace,
            name="",
            pod_sets=[{"count": 2, "requests": {"cpu": 1000, "memory": 64 * 2**20}}],
            manifest=manifest,
        )
    )
    assert ref.name.startswith("job-")
    assert kube.job(ref.name)["spec"]["suspend"] is True  # forced, whatever the manifest says


def test_a_manifest_that_asks_for_other_resources_than_the_workload_is_refused(kube: Kube):
    with pytest.raises(ClusterError) as caught:
        kube.cluster.create_job(
            JobRequest(
                namespace=kube.namespace,
                name="liar",
                pod_sets=[{"count": 1, "requests": {"cpu": 100}}],
                manifest=job_manifest(cpu="4"),
            )
        )
    assert not caught.value.retryable
    assert "asks for" in str(caught.value)
    with pytest.raises(ClusterError, match="one pod shape"):
        kube.cluster.create_job(
            JobRequest(
                namespace=kube.namespace,
                name="two-shapes",
                pod_sets=[
                    {"name": "a", "count": 1, "requests": {"cpu": 100}},
                    {"name": "b", "count": 1, "requests": {"cpu": 100}},
                ],
            )
        )


def test_creating_a_job_that_exists_is_a_clear_conflict(kube: Kube):
    kube.cluster.create_job(request("twin"))
    with pytest.raises(ClusterError) as caught:
        kube.cluster.create_job(request("twin"))
    assert caught.value.status == 409
    assert not caught.value.retryable


def test_creates_whose_answer_was_lost_are_not_made_twice(
    fake: FakeKube, adapter: KubernetesCluster
):
    fake.add_namespace("team-a")
    # Every other create fails; most of those failures come after the write happened.
    fake.set_faults(
        create=FaultSpec(error_rate=0.5, codes=(500, 503, 409), committed_rate=0.7), seed=3
    )
    for i in range(15):
        adapter.create_job(request(f"named-{i}"))
    for _ in range(15):
        adapter.create_job(
            JobRequest(
                namespace="team-a",
                name="",
                pod_sets=[{"count": 1, "requests": {"cpu": 1000, "memory": 64 * 2**20}}],
                manifest=job_manifest(),
            )
        )
    fake.clear_faults()
    assert fake.state()["faultsInjected"] > 5
    assert len(adapter.list_objects("batch", "v1", "jobs")) == 30


def test_an_unknown_namespace_is_a_clear_error(kube: Kube):
    with pytest.raises(ClusterError) as caught:
        kube.cluster.create_job(request("lost", namespace="no-such-namespace"))
    assert caught.value.status == 404
    assert not caught.value.retryable


# --- admitting, suspending, deleting ------------------------------------------------------


def test_admit_is_idempotent_and_pins_the_pool(kube: Kube):
    ref = kube.cluster.create_job(request("pinned"))
    kube.cluster.admit(ref, node_selector={POOL_LABEL: "a"})
    kube.cluster.admit(ref, node_selector={POOL_LABEL: "a"})  # a repeat changes nothing
    job = kube.job("pinned")
    assert job["spec"]["suspend"] is False
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {POOL_LABEL: "a"}
    assert job["metadata"]["annotations"][compat.MANAGED_ANNOTATION] == "true"
    if kube.fake is not None:
        assert unsuspend_counts(kube.fake.log_entries()) == Counter({ref.uid: 1})


def test_suspend_is_idempotent_and_stops_the_pods(kube: Kube):
    ref = kube.cluster.create_job(request("stopped", expected_runtime_s=600))
    kube.cluster.admit(ref, node_selector={})
    wait_until(lambda: info(kube.cluster, "stopped").state == RUNNING, timeout=60, interval=0.05)
    kube.cluster.suspend(ref)
    kube.cluster.suspend(ref)
    seen = wait_until(
        lambda: (j := info(kube.cluster, "stopped")).active == 0 and j, timeout=60, interval=0.05
    )
    assert seen.state == SUSPENDED
    assert seen.suspended


def test_a_missing_job_raises_job_not_found_and_delete_is_idempotent(kube: Kube):
    ref = kube.cluster.create_job(request("doomed"))
    kube.cluster.delete(ref)
    kube.cluster.delete(ref)  # already gone: fine
    with pytest.raises(JobNotFound):
        kube.cluster.admit(ref, node_selector={})
    with pytest.raises(JobNotFound):
        kube.cluster.suspend(ref)
    kube.cluster.tick()
    assert "doomed" not in {j.ref.name for j in kube.cluster.jobs()}


def test_a_namesake_is_not_admitted_nor_deleted_in_place_of_ours(kube: Kube):
    old = kube.cluster.create_job(request("reborn"))
    kube.cluster.delete(old)
    wait_until(
        lambda: "reborn" not in {j.ref.name for j in (kube.cluster.tick(), kube.cluster.jobs())[1]},
        timeout=30,
        interval=0.05,
    )
    new = kube.cluster.create_job(request("reborn"))
    assert new.uid != old.uid
    with pytest.raises(JobNotFound):
        kube.cluster.admit(old, node_selector={})
    kube.cluster.delete(old)  # not ours any more: left alone
    assert kube.job("reborn")["metadata"]["uid"] == new.uid
    assert kube.job("reborn")["spec"]["suspend"] is True


def test_admit_and_suspend_converge_through_faults(
    fake: FakeKube, adapter: KubernetesCluster, api_errors: ApiErrors
):
    fake.add_namespace("team-a")
    refs = [adapter.create_job(request(f"flaky-{i}", expected_runtime_s=600)) for i in range(12)]
    fake.set_faults(
        {
            "*": FaultSpec(
                error_rate=0.3,
                codes=(500, 503, 504, 409, 429),
                retry_after=0.01,
                committed_rate=0.5,
            )
        },
        seed=7,
    )
    for ref in refs:
        adapter.admit(ref, node_selector={})
    for ref in refs:
        adapter.suspend(ref)
    fake.clear_faults()
    counts = unsuspend_counts(fake.log_entries())
    assert counts == Counter({ref.uid: 1 for ref in refs})
    adapter.tick()
    assert all(j.suspended for j in adapter.jobs())
    labels = Counter(label for _, label in api_errors.seen)
    assert set(labels) <= {"500", "503", "504", "409", "429"}
    assert sum(labels.values()) >= 5


def test_429_waits_as_long_as_retry_after_says(fake: FakeKube, api_errors: ApiErrors):
    fake.add_namespace("team-a")
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        fake.clear_faults()  # the server calms down while we wait

    adapter = make_adapter(fake.url, api_errors, sleep=sleep)
    ref = adapter.create_job(request("throttled"))
    fake.set_faults(patch=FaultSpec(error_rate=1.0, codes=(429,), retry_after=1.0))
    adapter.admit(ref, node_selector={})
    assert waits
    assert waits[0] >= 1.0
    assert ("patch", "429") in api_errors.seen


def test_a_server_that_keeps_failing_gives_a_retryable_cluster_error(
    fake: FakeKube, api_errors: ApiErrors
):
    fake.add_namespace("team-a")
    adapter = make_adapter(
        fake.url, api_errors, policy=RetryPolicy(budget_s=0.3, base_s=0.01, cap_s=0.05)
    )
    ref = adapter.create_job(request("unlucky"))
    fake.set_faults(patch=FaultSpec(error_rate=1.0, codes=(503,)))
    started = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        adapter.suspend(ref)
    assert caught.value.retryable
    assert caught.value.status == 503
    assert time.monotonic() - started < 5  # bounded by the budget
    assert api_errors.seen.count(("patch", "503")) >= 2


def test_a_server_that_does_not_answer_gives_a_retryable_cluster_error(api_errors: ApiErrors):
    from tests.services import free_port

    adapter = make_adapter(
        f"http://127.0.0.1:{free_port()}",
        api_errors,
        policy=RetryPolicy(budget_s=0.2, base_s=0.01, cap_s=0.05),
    )
    with pytest.raises(ClusterError) as caught:
        adapter.tick()
    assert caught.value.retryable
    assert ("list", "timeout") in api_errors.seen


# --- reading ------------------------------------------------------------------------------


def test_which_jobs_are_managed(kube: Kube):
    ns = kube.namespace
    kube.create(job_manifest("suspended-at-creation"))
    kube.create(job_manifest("plain-running", suspend=False, runtime=600))
    kube.create(job_manifest("labelled", suspend=False, labels={compat.QUEUE_LABEL: "q"}))
    kube.create(
        job_manifest("alibaba-quota", suspend=False, labels={"alibabacloud.com/quota-name": "q"})
    )
    kube.create(
        job_manifest(
            "kube-queue-annotated", suspend=False, annotations={compat.SUSPEND_ANNOTATION: "true"}
        )
    )
    kube.create(
        job_manifest("kube-queue-queue", suspend=False, annotations={"kube-queue/queue-name": "q"})
    )
    child = job_manifest("child-of-a-jobset")
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "js",
            "uid": "0000",
            "controller": True,
        }
    ]
    kube.create(child)
    kube.cluster.tick()
    managed = {j.ref.name for j in kube.cluster.jobs() if j.ref.namespace == ns}
    assert managed == {
        "suspended-at-creation",
        "labelled",
        "alibaba-quota",
        "kube-queue-annotated",
        "kube-queue-queue",
    }


def test_job_states_priorities_and_runtimes(kube: Kube):
    kube.cluster.rest.call(
        "create",
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        body={"metadata": {"name": f"kq-high-{kube.namespace}"}, "value": 9100},
    )
    kube.create(job_manifest("ok", priority_class=f"kq-high-{kube.namespace}", deadline=120))
    annotations = {"koord-queue/expected-runtime-seconds": "30"}
    if kube.fake is not None:
        annotations["fake.koord-queue.io/fail"] = "true"
    kube.create(job_manifest("bad", annotations=annotations, runtime=1))
    ok, bad = info(kube.cluster, "ok"), info(kube.cluster, "bad")
    assert (ok.priority, ok.priority_class, ok.expected_runtime_s) == (
        9100,
        f"kq-high-{kube.namespace}",
        120,
    )
    assert bad.expected_runtime_s == 30
    kube.cluster.admit(ok.ref, node_selector={})
    kube.cluster.admit(bad.ref, node_selector={})
    done = wait_until(
        lambda: (j := info(kube.cluster, "ok")).state == SUCCEEDED and j, timeout=120, interval=0.05
    )
    assert done.started_at is not None
    assert done.finished_at is not None
    if kube.fake is not None:
        failed = wait_until(
            lambda: (j := info(kube.cluster, "bad")).state == FAILED and j,
            timeout=30,
            interval=0.05,
        )
        assert failed.message
    kube.cluster.rest.call(
        "delete", "DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/kq-high-{kube.namespace}"
    )


def test_nodes_show_capacity_taken_by_pods_the_queue_does_not_manage(
    fake: FakeKube, adapter: KubernetesCluster
):
    fake.add_namespace("team-a")
    fake.add_namespace("other")
    fake.add_node("free", {"cpu": "8", "memory": "32Gi"})
    fake.add_node("cordoned", {"cpu": "8", "memory": "32Gi"}, unschedulable=True)
    fake.add_node(
        "gpu",
        {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"},
        taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
    )
    not_ready = fake.add_node("sick", {"cpu": "8", "memory": "32Gi"})
    fake.store.force(
        "nodes",
        {
            **not_ready,
            "status": {**not_ready["status"], "conditions": [{"type": "Ready", "status": "False"}]},
        },
    )
    # Someone else's Job, running on "free" (first by name): 3 cpu unmanaged.
    fake.create("jobs", job_manifest("theirs", suspend=False, cpu="3", runtime=600), "other")
    # Ours, running too: accounted by its workload, not as reserved.
    ref = adapter.create_job(request("ours", cpu=2000, expected_runtime_s=600))
    adapter.admit(ref, node_selector={})
    wait_until(lambda: info(adapter, "ours").state == RUNNING, timeout=30, interval=0.05)
    nodes = {n.name: n for n in adapter.nodes()}
    assert nodes["free"].reserved == {"cpu": 3000, "memory": 64 * 2**20, "pods": 1}
    assert nodes["free"].allocatable["cpu"] == 8000
    assert nodes["cordoned"].unschedulable
    assert nodes["sick"].unschedulable
    assert not nodes["gpu"].unschedulable
    assert nodes["gpu"].taints == [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    assert nodes["gpu"].allocatable["nvidia.com/gpu"] == 4


def test_lists_are_read_page_by_page(fake: FakeKube, adapter: KubernetesCluster):
    fake.add_namespace("team-a")
    for i in range(520):
        fake.create("jobs", job_manifest(f"bulk-{i:03d}"), "team-a")
    adapter.tick()
    assert len(adapter.jobs()) == 520
    pages = [
        e
        for e in fake.log_entries(types=["request"])
        if e["verb"] == "list" and e["resource"] == "jobs.batch"
    ]
    assert any("continue=" in e["query"] for e in pages)


def test_an_expired_continue_token_restarts_the_list(fake: FakeKube, adapter: KubernetesCluster):
    fake.add_namespace("team-a")
    for i in range(30):
        fake.create("jobs", job_manifest(f"page-{i:02d}"), "team-a")
    once = adapter.rest.once
    calls = {"n": 0}

    def compact_after_first_page(method, path, **kw):
        result = once(method, path, **kw)
        calls["n"] += 1
        if calls["n"] == 1:
            fake.compact()
        return result

    adapter.rest.once = compact_after_first_page  # type: ignore[method-assign]
    items, _ = adapter.rest.list_all("/apis/batch/v1/jobs", page_size=10)
    assert len(items) == 30


def test_kubeconfig_connects(fake: FakeKube, tmp_path: Path):
    fake.add_node("n", {"cpu": "1"})
    cluster = KubernetesCluster(connect(str(write_kubeconfig(tmp_path / "config", fake.url))))
    assert [n.name for n in cluster.nodes()] == ["n"]
    with pytest.raises(ClusterError, match="cannot reach Kubernetes"):
        connect(str(tmp_path / "missing"))


def test_the_token_refresh_hook_runs_once_a_second_and_stays_wrapped(
    fake: FakeKube, tmp_path: Path
):
    """The kubeconfig loader's hook sets the host again on each call (reading every
    environment variable for proxies); it runs at most once per TOKEN_CHECK_S."""
    fake.add_node("n", {"cpu": "1"})
    api = connect(str(write_kubeconfig(tmp_path / "config", fake.url)))
    hook = api.configuration.refresh_api_key_hook
    assert isinstance(hook, ThrottledRefresh)
    runs: list[object] = []

    def loaders_hook(configuration: Any) -> None:  # as kubernetes.config's does
        runs.append(configuration)
        configuration.api_key["BearerToken"] = "Bearer fakekube"
        configuration.refresh_api_key_hook = loaders_hook

    now = [100.0]
    hook.hook, hook.clock = loaders_hook, lambda: now[0]
    rest = KubernetesCluster(api).rest
    for _ in range(5):
        assert [n["metadata"]["name"] for n in rest.once("GET", "/api/v1/nodes")["items"]] == ["n"]
    assert len(runs) == 1  # five requests, one refresh
    assert api.configuration.refresh_api_key_hook is hook  # put back after the loader's
    assert api.configuration.api_key["BearerToken"] == "Bearer fakekube"
    now[0] += TOKEN_CHECK_S
    rest.once("GET", "/api/v1/nodes")
    assert len(runs) == 2  # due again a second later


def test_the_connection_pool_holds_every_write_on_its_way(fake: FakeKube, tmp_path: Path):
    api = connect(str(write_kubeconfig(tmp_path / "config", fake.url)))
    KubernetesCluster(api, write_concurrency=8)
    assert api.configuration.connection_pool_maxsize == 8 * WRITE_ROUNDS_AT_ONCE + 2
    assert (
        api.rest_client.pool_manager.connection_pool_kw["maxsize"] == 8 * WRITE_ROUNDS_AT_ONCE + 2
    )


def test_pod_requests_follow_the_scheduler():
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}}},
            {"resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}},
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "2"}}},
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
        ],
        "overhead": {"memory": "10Mi"},
    }
    assert pod_requests(spec) == {"cpu": 2000, "memory": GI + 512 * 2**20 + 10 * 2**20}


def test_jobref_of_another_kind_is_refused(adapter: KubernetesCluster):
    with pytest.raises(ClusterError, match="not a kind"):
        adapter.admit(JobRef("CronJob", "batch/v1", "team-a", "x"), node_selector={})
