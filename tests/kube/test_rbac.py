"""deploy/rbac.yaml grants exactly what the adapter, the watcher, the import and the
QueueUnit mirror use: every request they make against the fake is checked against it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from queueing.cluster.base import JobRequest
from queueing.cluster.events import KubeEvent
from queueing.cluster.kubernetes import ClusterWatcher, KubernetesCluster
from queueing.cluster.kubernetes.configwatch import ConfigWatcher
from queueing.kubequeue import read_objects
from queueing.namespacequeues import NAMESPACES
from queueing.quotawriteback import ELASTIC_QUOTAS, RUNTIME_ANNOTATION
from tests.fakekube import FakeKube, FaultSpec
from tests.kube.conftest import make_adapter
from tests.kube.test_kinds import jobset, kubeflow, rayjob
from tests.services import wait_until

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"


def granted() -> set[tuple[str, str, str]]:
    """(group, resource, verb) the ClusterRole allows."""
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["kind"] == "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def used(fake: FakeKube) -> set[tuple[str, str, str]]:
    out = set()
    for entry in fake.log_entries(types=["request"]):
        if not entry.get("resource"):
            continue  # discovery and /version
        plural, _, group = entry["resource"].partition(".")
        resource = f"{plural}/{entry['subresource']}" if entry.get("subresource") else plural
        out.add((group, resource, entry["verb"]))
    return out


def mpijob(name: str) -> dict[str, Any]:
    replica = kubeflow("PyTorchJob", name)["spec"]["pytorchReplicaSpecs"]["Master"]
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {"mpiReplicaSpecs": {"Launcher": replica, "Worker": replica}},
    }


def trainjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 1, "resourcesPerNode": {"requests": {"cpu": "1"}}},
        },
    }


def exercise(fake: FakeKube, cluster: KubernetesCluster) -> None:
    fake.add_namespace("team-a")
    fake.add_node("n1", {"cpu": "8", "memory": "32Gi"})
    fake.create("priorityclasses", {"metadata": {"name": "high"}, "value": 100})
    fake.create("queues", {"metadata": {"name": "q"}, "spec": {}}, "team-a")
    fake.create(
        "elasticquotas", {"metadata": {"name": "team-a"}, "spec": {"min": {}, "max": {}}}, "team-a"
    )
    pod_set = {"count": 1, "requests": {"cpu": 1000, "memory": 2**30}}
    refs = [cluster.create_job(JobRequest(namespace="team-a", name="job", pod_sets=[pod_set]))]
    for name, manifest in (
        ("js", jobset("js")),
        ("ray", rayjob("ray")),
        ("pt", kubeflow("PyTorchJob", "pt")),
        ("tf", kubeflow("TFJob", "tf")),
        ("mpi", mpijob("mpi")),
        ("train", trainjob("train")),
    ):
        refs.append(
            cluster.create_job(
                JobRequest(namespace="team-a", name=name, pod_sets=[pod_set], manifest=manifest)
            )
        )
    fake.set_faults(patch=FaultSpec(error_rate=1.0, codes=(409,)))
    cluster.suspend(refs[0])  # a conflict re-reads: suspended already, so done
    fake.clear_faults()
    cluster.tick()
    for ref in refs:
        cluster.admit(ref, node_selector={"koord-queue/pool": "a"})
        cluster.suspend(ref)
    cluster.mirror_queue_units({("Job", "team-a", "job"): ("Dequeued", "")})
    story = KubeEvent(refs[0], "Queued", "Queued in queue q of quota team-a.")
    cluster.record_events([story, story])  # created, then bumped
    KubernetesCluster(cluster.api).record_events([story])  # another recorder: 409, get, patch
    # The runtime write-back (queueing/quotawriteback.py) annotates ElasticQuotas.
    cluster.patch_annotations(ELASTIC_QUOTAS, "team-a", "team-a", {RUNTIME_ANNOTATION: "{}"})
    # The available queues of a namespace (queueing/namespacequeues.py) annotate it.
    cluster.patch_annotations(NAMESPACES, "", "team-a", {"koord-queue/available-queue": "{}"})
    read_objects(cluster)
    # Quotas managed here written as ElasticQuotas (queueing/kubequotas.py).
    ours = {"metadata": {"name": "made-here", "namespace": "team-a"}, "spec": {"max": {}}}
    cluster.quota_objects.list_all()
    cluster.quota_objects.create(ours)
    cluster.quota_objects.patch("team-a", "made-here", {"spec": {"max": {"cpu": "1"}}})
    cluster.quota_objects.delete("team-a", "made-here")
    for watcher in (
        ClusterWatcher(cluster, lambda reason: None, watch_timeout_s=1),
        ConfigWatcher(cluster, lambda reason: None, watch_timeout_s=1),  # KQ_KUBE_LIVE_CONFIG
    ):
        watcher.start()
        try:
            assert watcher.wait_synced(10)
            wait_until(
                lambda w=watcher: all(i.watches for i in w.informers), timeout=10, interval=0.01
            )
        finally:
            watcher.stop()
    for ref in refs:
        cluster.delete(ref)


def test_the_cluster_role_grants_exactly_what_is_used(fake: FakeKube):
    cluster = make_adapter(fake.url, namespaces=["team-a"], mirror_queue_units=True)
    exercise(fake, cluster)
    assert used(fake) - granted() == set(), "used but not granted"
    assert granted() - used(fake) == set(), "granted but never used"
