"""kube-queue's and koord-queue's names that the queue reads and writes (issue 12, item 4).

The plain-dict rules first (no API server), then what the adapter writes on a job, then
the import and the sync on kube-queue's own examples (its repository's
``examples/multiqueues`` and ``examples/tfjob``: ResourceQuotas, namespaced Queues,
TFJobs held only by ``scheduling.x-k8s.io/suspend``, a QueueUnit).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from queueing import compat
from queueing.admission import tick
from queueing.choices import Phase
from queueing.cluster.base import JobInfo, JobRef
from queueing.cluster.kubernetes import KubernetesCluster
from queueing.cluster.kubernetes.queueunits import queue_unit_for, queue_unit_hints
from queueing.kubequeue import find_queue, import_kube_queue, read_objects
from queueing.models import Queue, Quota, Workload
from tests.fakekube import FakeKube
from tests.kube.conftest import Kube, job_manifest, make_adapter
from tests.kube.test_import_kube_queue import elastic_quota

# --- plain rules -------------------------------------------------------------------------


def test_koord_queue_reads_alibabacloud_s_quota_label_first() -> None:
    labels = {
        "quota.scheduling.koordinator.sh/name": "koord",
        "quota.scheduling.alibabacloud.com/name": "ali",
    }
    assert compat.quota_name(labels) == "ali"
    assert compat.quota_name({"quota.scheduling.koordinator.sh/name": "koord"}) == "koord"
    assert compat.quota_name({"alibabacloud.com/quota-name": "old"}) == "old"
    assert compat.quota_name({}) is None


def test_timestamps_are_written_and_read_in_go_s_layout() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=UTC)
    assert compat.go_time(moment) == "2026-01-02 03:04:05.12 +0000 UTC"
    assert compat.go_time(moment.replace(microsecond=0)) == "2026-01-02 03:04:05 +0000 UTC"
    # What koord-queue writes (time.Now().String(), monotonic reading included) reads back.
    assert compat.parse_go_time("2026-01-02 03:04:05.12 +0000 UTC m=+12.5") == moment
    assert compat.parse_go_time("2026-01-02 11:04:05 +0800 CST") == moment.replace(microsecond=0)
    assert compat.parse_go_time("yesterday") is None


def test_queue_unit_names_follow_koord_queue_s_job_extensions() -> None:
    assert compat.queue_unit_name("TFJob", "job1") == "job1-tf-qu"
    assert compat.queue_unit_name("PyTorchJob", "train") == "train-py-qu"
    assert compat.queue_unit_name("RayJob", "rayjob-test") == "rayjob-test-ray-qu"
    assert compat.queue_unit_name("MPIJob", "m") == "m-mpi-qu"
    assert compat.queue_unit_name("Job", "plain") == "plain"  # a Job's unit is its namesake


def test_phases_under_either_project_s_names() -> None:
    assert compat.kube_queue_phase(Phase.ADMITTED, "kube-queue") == "Dequeued"
    assert compat.kube_queue_phase(Phase.ADMITTED, "koord-queue") == "SchedReady"
    assert compat.kube_queue_phase(Phase.BACKOFF, "koord-queue") == "SchedFailed"
    assert compat.kube_queue_phase(Phase.PREEMPTED, "koord-queue") == "Enqueued"
    assert compat.kube_queue_phase(Phase.SUCCEEDED, "koord-queue") == "Succeed"


def test_either_hold_makes_a_job_the_queue_s() -> None:
    assert compat.is_managed({}, {"queue-suspend": "true"}, suspended=False)
    assert compat.is_managed({}, {"scheduling.x-k8s.io/suspend": "True"}, suspended=False)
    assert not compat.is_managed({}, {"queue-suspend": "false"}, suspended=False)


def test_the_running_time_limit_is_read_from_either_name() -> None:
    assert compat.max_execution_s({}, {"koord-queue/maximum-execution-time-seconds": "600"}) == 600
    assert compat.max_execution_s({"kueue.x-k8s.io/max-exec-time-seconds": "60"}, {}) == 60
    assert compat.max_execution_s({}, {"kube-queue/maximum-execution-time-seconds": "-1"}) is None
    assert compat.max_execution_s({}, {"koord-queue/maximum-execution-time-seconds": "x"}) is None


def test_a_queue_unit_s_spec_completes_its_job() -> None:
    unit = {
        "spec": {
            "queue": "default",
            "priority": 100,
            "priorityClassName": "high-priority",
            "maximumExecutionTimeSeconds": 900,
        }
    }
    hints = queue_unit_hints(unit, {"koord-queue/priority": "5"})
    assert hints == {
        "koord-queue/priority": "5",  # the job's own word wins
        "kube-queue/queue-name": "default",
        "kube-queue/priority-class-name": "high-priority",
        "kube-queue/maximum-execution-time-seconds": "900",
    }


def test_a_queue_unit_written_for_a_job_carries_its_pod_sets() -> None:
    job = JobInfo(
        ref=JobRef("TFJob", "kubeflow.org/v1", "ns", "job1", "u-1"),
        state="Suspended",
        suspended=True,
        pod_sets=[
            {"name": "ps", "count": 1, "requests": {"cpu": 1000}},
            {"name": "worker", "count": 2, "requests": {"cpu": 1000, "memory": 2**30}},
        ],
        labels={},
        annotations={"koord-queue/maximum-execution-time-seconds": "60"},
        priority_class="high",
    )
    unit = queue_unit_for(job)
    assert unit["metadata"]["name"] == "job1-tf-qu"
    spec = unit["spec"]
    assert spec["resource"] == {"cpu": "3", "memory": "2Gi"}
    assert [(p["name"], p["count"]) for p in spec["podSets"]] == [("ps", 1), ("worker", 2)]
    assert spec["podSets"][1]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"}
    }
    assert (spec["priorityClassName"], spec["maximumExecutionTimeSeconds"]) == ("high", 60)


# --- what the adapter writes on a job ----------------------------------------------------


def test_admission_clears_both_holds_and_stamps_the_dequeue(kube: Kube) -> None:
    body = job_manifest("held")
    body["metadata"]["annotations"] = {
        "scheduling.x-k8s.io/suspend": "true",
        "queue-suspend": "true",
    }
    created = kube.create(body)
    ref = JobRef("Job", "batch/v1", kube.namespace, "held", created["metadata"]["uid"])
    before = datetime.now(UTC).replace(microsecond=0)
    kube.cluster.admit(ref, node_selector={})
    annotations = kube.job("held")["metadata"]["annotations"]
    assert "scheduling.x-k8s.io/suspend" not in annotations
    assert "queue-suspend" not in annotations
    for prefix in ("koord-queue/", "kube-queue/"):
        stamp = compat.parse_go_time(annotations[prefix + "job-dequeue-timestamp"])
        assert stamp is not None
        assert stamp >= before
    kube.cluster.suspend(ref)
    annotations = kube.job("held")["metadata"]["annotations"]
    assert annotations["koord-queue/job-dequeue-timestamp"] == ""  # as koord-queue's Suspend
    assert annotations["kube-queue/job-dequeue-timestamp"] == ""


def test_a_created_job_is_stamped_as_enqueued(kube: Kube) -> None:
    from queueing.cluster.base import JobRequest

    ref = kube.cluster.create_job(
        JobRequest(
            namespace=kube.namespace,
            name="made",
            pod_sets=[{"count": 1, "requests": {"cpu": 500}}],
        )
    )
    annotations = kube.job(ref.name)["metadata"]["annotations"]
    assert annotations["koord-queue/job-has-enqueued"] == "true"
    assert compat.parse_go_time(annotations["kube-queue/job-enqueue-timestamp"]) is not None


# --- the import and the sync on kube-queue's examples -----------------------------------

pytestmark_db = pytest.mark.django_db


def _tfjob(name: str, namespace: str | None = None) -> dict[str, Any]:
    """kube-queue's example TFJob: one PS and two workers of 1 cpu / 1Gi, held by the
    annotation only (no runPolicy.suspend)."""

    def replica(count: int) -> dict[str, Any]:
        container = {
            "name": "tensorflow",
            "image": "busybox:stable",
            "command": ["/bin/sh", "-c", "--"],
            "args": ["sleep 30s"],
            "resources": {
                "requests": {"cpu": 1, "memory": "1Gi"},
                "limits": {"cpu": 1, "memory": "1Gi"},
            },
        }
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }

    meta: dict[str, Any] = {"name": name, "annotations": {"scheduling.x-k8s.io/suspend": "true"}}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": meta,
        "spec": {"tfReplicaSpecs": {"PS": replica(1), "Worker": replica(2)}},
    }


def _resource_quota(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": meta,
        "spec": {"hard": {"cpu": "4", "memory": "4Gi"}},
    }


def _queue(name: str, namespace: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"queuePolicy": "Priority"},
    }


def _cluster(fake: FakeKube, namespaces: list[str]) -> KubernetesCluster:
    for namespace in namespaces:
        if namespace != "default":  # the fake has it, as a real cluster does
            fake.add_namespace(namespace)
    fake.add_node("n1", {"cpu": "8", "memory": "32Gi"})
    return make_adapter(fake.url, namespaces=namespaces, kinds=["Job", "TFJob"])


@pytestmark_db
def test_kube_queue_s_multiqueues_example_imports(
    fake: FakeKube, use_cluster: Callable[[Any], None]
) -> None:
    cluster = _cluster(fake, ["queue1", "queue2"])
    use_cluster(cluster)
    for n in ("1", "2"):
        fake.create("resourcequotas", _resource_quota(f"queue{n}", f"queue{n}"), f"queue{n}")
        fake.create("queues", _queue(f"queue{n}", f"queue{n}"), f"queue{n}")
        # The example names its jobs job1_q1 ...: a real API server refuses "_" in names
        # (so does the fake); the same jobs, named as Kubernetes allows.
        for j in ("1", "2"):
            fake.create("tfjobs", _tfjob(f"job{j}-q{n}", f"queue{n}"), f"queue{n}")
    report = import_kube_queue(read_objects(cluster))
    assert not [i for i in report.items if i.verb == "error"], report.lines()
    for n in ("1", "2"):
        quota = Quota.objects.get(name=f"queue{n}")
        assert (quota.min, quota.max) == ({"cpu": 4000, "memory": 4 * 2**30},) * 2
        assert (quota.namespaces, quota.tenant.name) == ([f"queue{n}"], f"queue{n}")
        assert quota.default_queue.name == f"queue{n}"
        assert quota.kube_ref == f"ResourceQuota queue{n}/queue{n}"
        assert quota.source == "kubernetes"
    # Each ResourceQuota (4 cpu) admits one of its namespace's two 3-cpu TFJobs.
    tick(cluster=cluster)
    tick(cluster=cluster)
    admitted = Workload.objects.filter(phase=Phase.ADMITTED)
    assert sorted(w.quota.name for w in admitted) == ["queue1", "queue2"]
    pending = Workload.objects.filter(phase=Phase.PENDING)
    assert sorted(w.quota.name for w in pending) == ["queue1", "queue2"]
    for workload in admitted:
        obj = fake.store.get("tfjobs", workload.namespace, workload.name)
        assert "scheduling.x-k8s.io/suspend" not in obj["metadata"]["annotations"]
        assert obj["spec"]["runPolicy"]["suspend"] is False
    for workload in pending:
        obj = fake.store.get("tfjobs", workload.namespace, workload.name)
        assert obj["spec"]["runPolicy"]["suspend"] is True  # held for real, not by hope


@pytestmark_db
def test_kube_queue_s_tfjob_example_runs_through_its_queue_unit(
    fake: FakeKube, use_cluster: Callable[[Any], None]
) -> None:
    cluster = _cluster(fake, ["default"])
    cluster.reader.mirror = True  # QueueUnits are read (KQ_MIRROR_QUEUEUNITS)
    use_cluster(cluster)
    fake.create("resourcequotas", _resource_quota("default"), "default")
    fake.create("tfjobs", _tfjob("job1"), "default")
    fake.create(
        "queueunits",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "QueueUnit",
            "metadata": {"name": "unit1", "namespace": "default"},
            "spec": {
                "consumerRef": {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "TFJob",
                    "name": "job1",
                    "namespace": "default",
                },
                "queue": "default",
                "priority": 100,
                "priorityClassName": "high-priority",
                "resource": {"cpu": 3, "memory": "3Gi"},
            },
        },
        "default",
    )
    report = import_kube_queue(read_objects(cluster))
    lines = "\n".join(report.lines())
    assert "error" not in {i.verb for i in report.items}, lines
    assert "does not exist" not in lines  # kube-queue's implicit "default" queue
    tick(cluster=cluster)
    tick(cluster=cluster)
    workload = Workload.objects.get(name="job1")
    assert (workload.quota.name, workload.phase, workload.priority) == (
        "default",
        Phase.ADMITTED,
        100,
    )
    assert workload.priority_class == "high-priority"


@pytestmark_db
def test_queues_of_one_name_in_two_namespaces_stay_apart(fake: FakeKube) -> None:
    cluster = _cluster(fake, ["ns-a", "ns-b"])
    for ns in ("ns-a", "ns-b"):
        fake.create("resourcequotas", _resource_quota("rq", ns), ns)
        fake.create("queues", _queue("batch", ns), ns)
    report = import_kube_queue(read_objects(cluster))
    assert "error" not in {i.verb for i in report.items}, report.lines()
    a, b = find_queue("batch", "ns-a"), find_queue("batch", "ns-b")
    assert a is not None
    assert b is not None
    assert a.pk != b.pk
    assert {a.name, b.name} == {"ns-a-batch", "ns-b-batch"}
    assert (a.tenant.name, b.tenant.name) == ("ns-a", "ns-b")
    assert (a.kube_ref, b.kube_ref) == ("Queue ns-a/batch", "Queue ns-b/batch")
    # A second run changes nothing and keeps the names.
    again = import_kube_queue(read_objects(cluster))
    assert again.changes == 0, again.lines()
    assert set(Queue.objects.values_list("name", flat=True)) >= {"ns-a-batch", "ns-b-batch"}


@pytestmark_db
def test_koord_queue_s_queues_and_quota_routing_annotations(fake: FakeKube) -> None:
    cluster = _cluster(fake, ["team-a", "team-b", "koord-queue"])
    fake.create(
        "elasticquotas",
        elastic_quota("team-a", min={"cpu": "2"}, max={"cpu": "4"}, namespace="team-a"),
        "team-a",
    )
    fake.create(
        "elasticquotas",
        elastic_quota("team-b", min={"cpu": "2"}, max={"cpu": "4"}, namespace="team-b"),
        "team-b",
    )
    home = "koord-queue"
    fake.create(
        "queues", _queue("a-own", home, **{"koord-queue/quota-fullname": "root/team-a"}), home
    )
    fake.create(
        "queues",
        _queue("b-shared", home, **{"kube-queue/available-quota-in-queue": "team-b"}),
        home,
    )
    fake.create("queues", _queue("anyone", home, **{"koord-queue/available-quota": "*"}), home)
    report = import_kube_queue(read_objects(cluster))
    errors = {i.what: i.detail for i in report.items if i.verb == "error"}
    # Koordinator's rule: an ElasticQuota takes the namespace it lives in.
    assert Quota.objects.get(name="team-a").namespaces == ["team-a"]
    a_own = Queue.objects.get(name="a-own")
    assert (a_own.tenant.name, Quota.objects.get(name="team-a").default_queue) == ("team-a", a_own)
    assert Queue.objects.get(name="b-shared").tenant.name == "team-b"
    assert "spans several tenants" not in errors.get("queue anyone", "")
    assert (
        "no quota-fullname or available-quota annotation names its quota" in errors["queue anyone"]
    )
    assert find_queue("a-own", "team-a") == a_own  # jobs of any namespace find it


@pytestmark_db
def test_koordinator_s_quota_labels_and_namespace_annotations(fake: FakeKube) -> None:
    cluster = _cluster(fake, ["lab", "shared", "koordinator-system"])
    fake.store.patch(
        "namespaces",
        "",
        "shared",
        {"metadata": {"annotations": {"koord-queue/available-quota": "leaf"}}},
    )
    quotas = [
        elastic_quota(
            "tree-2",
            min={"cpu": "6"},
            max={"cpu": "6"},
            labels={
                "quota.scheduling.koordinator.sh/is-root": "true",
                "quota.scheduling.koordinator.sh/tree-id": "t2",
            },
        ),
        elastic_quota(
            "lab",
            parent="tree-2",
            min={"cpu": "4"},
            max={"cpu": "6"},
            labels={"quota.scheduling.koordinator.sh/is-parent": "true"},
        ),
        elastic_quota("leaf", parent="lab", min={"cpu": "1"}, max={"cpu": "2"}),
    ]
    for quota in quotas:
        fake.create("elasticquotas", quota, "koordinator-system")
    report = import_kube_queue(read_objects(cluster))
    assert "error" not in {i.verb for i in report.items}, report.lines()
    tree = Quota.objects.get(name="tree-2")
    assert (tree.parent, tree.tenant, tree.kube_ref) == (
        None,
        None,
        "ElasticQuota koordinator-system/tree-2",
    )
    lab = Quota.objects.get(name="lab")
    assert (lab.parent, lab.tenant.name, lab.namespaces) == (tree, "lab", [])  # is-parent
    leaf = Quota.objects.get(name="leaf")
    assert (leaf.parent, leaf.tenant.name) == (lab, "lab")
    assert leaf.namespaces == ["shared"]  # named by the namespace's available-quota
    assert not Quota.objects.filter(name="root").exists()  # nothing under another root
    assert json.dumps(leaf.max) == json.dumps({"cpu": 2000})


@pytestmark_db
def test_koordinator_s_lending_and_weight_names_on_an_elastic_quota(fake: FakeKube) -> None:
    cluster = _cluster(fake, ["team-a", "team-b"])
    lent = {"quota.scheduling.koordinator.sh/allow-lent-resource": "false"}
    weight = {"quota.scheduling.koordinator.sh/shared-weight": '{"cpu": "3"}'}
    fake.create(
        "elasticquotas",
        elastic_quota(
            "team-a",
            min={"cpu": "2"},
            max={"cpu": "4"},
            namespace="team-a",
            labels=lent,
            annotations=weight,
        ),
        "team-a",
    )
    fake.create(
        "elasticquotas",
        elastic_quota("team-b", min={"cpu": "2"}, max={"cpu": "4"}, namespace="team-b"),
        "team-b",
    )
    report = import_kube_queue(read_objects(cluster))
    assert "error" not in {i.verb for i in report.items}, report.lines()
    a, b = Quota.objects.get(name="team-a"), Quota.objects.get(name="team-b")
    assert (a.allow_lent, a.shared_weight) == (False, {"cpu": 3000})  # keeps its min
    assert (b.allow_lent, b.shared_weight) == (True, {})  # Koordinator's defaults


@pytestmark_db
def test_kube_queue_s_quota_fullname_and_the_parent_s_on_a_queue(fake: FakeKube) -> None:
    cluster = _cluster(fake, ["team-a", "koord-queue"])
    fake.create(
        "elasticquotas",
        elastic_quota("team-a", min={"cpu": "2"}, max={"cpu": "4"}, namespace="team-a"),
        "team-a",
    )
    home = "koord-queue"
    names = {
        "kube-queue/quota-fullname": "root/team-a",
        # Redundant here (the parent follows from the quota tree): read past, not an error.
        "kube-queue/parent-quota-fullname": "root",
    }
    fake.create("queues", _queue("a-kube", home, **names), home)
    report = import_kube_queue(read_objects(cluster))
    assert "error" not in {i.verb for i in report.items}, report.lines()
    queue = Queue.objects.get(name="a-kube")
    assert (queue.tenant.name, Quota.objects.get(name="team-a").default_queue) == ("team-a", queue)


def test_koord_queue_s_held_phases_read_as_admitted_on_a_queue_unit() -> None:
    from queueing.cluster.kubernetes.queueunits import admitted_conditions

    unit: dict[str, Any] = {"status": {}}
    for phase in ("Reserved", "SchedReady", "SchedSucceed", "Dequeued", "Running"):
        [condition] = admitted_conditions(unit, phase, "")
        assert (condition["type"], condition["status"]) == ("Admitted", "True"), phase
    for phase in ("Enqueued", "SchedFailed", "TimeoutBackoff", "Failed"):
        [condition] = admitted_conditions(unit, phase, "")
        assert condition["status"] == "False", phase
