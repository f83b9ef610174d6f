"""Configuration objects watched live (issue 12 item 2): the watch process sees an
ElasticQuota, ElasticQuotaTree or Queue change within a watch event and has the next
sync apply it at once; the queue's own write-back (runtime/request annotations) and the
ElasticQuotas it writes for quotas managed here never read as a change (no loop)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from django.core.cache import cache

from queueing import kubeconfig, kubeobjects, namespacequeues, quotawriteback
from queueing.admission import tick
from queueing.cluster.kubernetes import KubernetesCluster
from queueing.cluster.kubernetes.configwatch import ConfigWatcher
from queueing.models import Quota
from queueing.watch import run_watch
from tests.fakekube import FakeKube
from tests.kube.conftest import job_manifest, make_adapter
from tests.kube.test_import_kube_queue import elastic_quota
from tests.services import wait_until

pytestmark = pytest.mark.django_db

EQ = "elasticquotas"


@pytest.fixture
def live(settings: Any) -> None:
    settings.KQ_KUBE_LIVE_CONFIG = True
    settings.KQ_KUBE_CONFIG_SYNC_S = 0.0
    settings.KQ_QUOTA_WRITEBACK_S = 0.0
    cache.delete(kubeconfig.DIGEST_KEY)
    cache.delete(kubeconfig.CHANGED_KEY)
    kubeconfig._last.clear()


@pytest.fixture
def cluster(fake: FakeKube) -> Iterator[KubernetesCluster]:
    for ns in ("team-a", "team-b"):
        fake.add_namespace(ns)
    fake.add_node("n1", {"cpu": "16", "memory": "64Gi"})
    adapter = make_adapter(fake.url, namespaces=["team-a", "team-b"], kinds=["Job"])
    yield adapter
    adapter.api.close()


@pytest.fixture
def reasons(cluster: KubernetesCluster) -> Iterator[list[str]]:
    seen: list[str] = []
    watcher = ConfigWatcher(cluster, seen.append, watch_timeout_s=5)
    watcher.start()
    assert watcher.wait_synced(10)
    yield seen
    watcher.stop()


def edit_max(fake: FakeKube, name: str, namespace: str, cpu: str) -> None:
    obj = fake.store.get(EQ, namespace, name)
    fake.store.update(EQ, namespace, name, {**obj, "spec": {**obj["spec"], "max": {"cpu": cpu}}})


def test_an_edit_is_a_change_and_the_queues_own_writes_are_not(
    fake: FakeKube, reasons: list[str]
) -> None:
    fake.create(
        EQ,
        elastic_quota("team-a", min={"cpu": "2"}, max={"cpu": "4"}, namespace="team-a"),
        "team-a",
    )
    wait_until(lambda: "ElasticQuota team-a added" in reasons, timeout=10, interval=0.01)
    # The write-back's annotations, and an ElasticQuota the queue wrote itself: nothing.
    fake.store.patch(
        EQ,
        "team-a",
        "team-a",
        {"metadata": {"annotations": {kubeobjects.RUNTIME_ANNOTATION: '{"cpu":"3"}'}}},
    )
    ours = elastic_quota("made-here", min={}, max={"cpu": "1"}, namespace="team-b")
    ours["metadata"]["labels"][kubeobjects.OWNER_LABEL] = kubeobjects.OWNER
    fake.create(EQ, ours, "team-b")
    fake.store.patch(
        EQ, "team-b", "made-here", {"metadata": {"labels": {"extra": "x"}}}
    )  # ours still
    # Then an edit of what the object says, and a deletion: each one change, in order.
    edit_max(fake, "team-a", "team-a", "6")
    fake.store.delete(EQ, "team-a", "team-a")
    wait_until(lambda: "ElasticQuota team-a deleted" in reasons, timeout=10, interval=0.01)
    # One watch stream delivers in order: the writes above came before these two.
    # (The first list reported the namespaces that were there: not ElasticQuotas.)
    assert [r for r in reasons if r.startswith("ElasticQuota ")] == [
        "ElasticQuota team-a added",
        "ElasticQuota team-a modified",
        "ElasticQuota team-a deleted",
    ]


def test_trees_queues_and_namespaces_are_watched_too(fake: FakeKube, reasons: list[str]) -> None:
    fake.create("elasticquotatrees", tree({"name": "team-a", "max": {"cpu": "4"}}), "kube-system")
    fake.create(
        "queues", {"metadata": {"name": "q1"}, "spec": {"queuePolicy": "Priority"}}, "team-a"
    )
    fake.store.patch(
        "namespaces",
        None,
        "team-b",
        {"metadata": {"annotations": {"koord-queue/available-quota-in-namespace": "team-a"}}},
    )

    def changes() -> list[str]:  # less what the first list reported
        return sorted(r for r in reasons if not r.startswith("Namespace ") or "added" not in r)

    wait_until(lambda: len(changes()) >= 3, timeout=10, interval=0.01)
    assert changes() == [
        "ElasticQuotaTree default added",
        "Namespace team-b modified",
        "Queue q1 added",
    ]


def tree(*children: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "default"},
        "spec": {
            "root": {
                "name": "root",
                "min": {"cpu": "16"},
                "max": {"cpu": "16"},
                "children": list(children),
            }
        },
    }


def test_the_watch_has_the_next_sync_apply_an_edit_at_once_and_write_back_does_not_loop(
    fake: FakeKube,
    cluster: KubernetesCluster,
    use_cluster: Callable[[Any], None],
    live: None,
    settings: Any,
) -> None:
    fake.create(
        EQ,
        elastic_quota("team-a", min={"cpu": "4"}, max={"cpu": "8"}, namespace="team-a"),
        "team-a",
    )
    use_cluster(cluster)
    tick(cluster=cluster)
    assert Quota.objects.get(name="team-a").max == {"cpu": 8000}
    # From now on the periodic look is an hour away: only the watch can make it look.
    settings.KQ_KUBE_CONFIG_SYNC_S = 3600.0
    triggers: list[Mapping[str, int]] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=run_watch,
        args=(cluster, stop),
        kwargs={"trigger": triggers.append, "debounce_s": 0.05, "watch_timeout_s": 5},
        daemon=True,
    )
    thread.start()
    try:
        # The first list reports every object once (ADDED): one trigger, nothing changed.
        wait_until(lambda: triggers, timeout=10, interval=0.01)
        assert kubeconfig.sync_config(cluster) is None  # marked, looked, nothing changed
        # The write-back annotates the ElasticQuota: no trigger. A new ElasticQuota
        # after it, on the same watch stream, shows the stream has got that far.
        before = len(triggers)
        Quota.objects.filter(name="team-a").update(runtime={"cpu": 3000})
        assert quotawriteback.publish(cluster) == 1
        annotated = fake.store.get(EQ, "team-a", "team-a")["metadata"]["annotations"]
        assert kubeobjects.RUNTIME_ANNOTATION in annotated
        marker = elastic_quota("marker", min={}, max={"cpu": "1"}, namespace="team-b")
        fake.create(EQ, marker, "team-b")
        wait_until(
            lambda: any("ElasticQuota marker added" in t for t in triggers[before:]),
            timeout=10,
            interval=0.01,
        )
        assert not any("ElasticQuota team-a modified" in t for t in triggers), triggers
        assert kubeconfig.sync_config(cluster) is not None  # the marker, imported
        assert Quota.objects.filter(name="marker").exists()
        # An edit: triggered, and the next sync applies it although the timer is far off.
        before = len(triggers)
        edit_max(fake, "team-a", "team-a", "12")
        wait_until(
            lambda: any("ElasticQuota team-a modified" in t for t in triggers[before:]),
            timeout=10,
            interval=0.01,
        )
        report = kubeconfig.sync_config(cluster)
        assert report is not None
        assert Quota.objects.get(name="team-a").max == {"cpu": 12000}
        assert kubeconfig.sync_config(cluster) is None  # the mark is spent
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()


def test_an_elastic_quota_tree_is_a_quota_tree(
    fake: FakeKube, cluster: KubernetesCluster, use_cluster: Callable[[Any], None], live: None
) -> None:
    fake.add_namespace("ml")
    fake.create(
        "elasticquotatrees",
        tree(
            {
                "name": "research",
                "min": {"cpu": "8"},
                "max": {"cpu": "12"},
                "children": [
                    {
                        "name": "vision",
                        "namespaces": ["team-a"],
                        "min": {"cpu": "4"},
                        "max": {"cpu": "8"},
                    },
                    {"name": "nlp", "namespaces": ["ml"], "min": {"cpu": "4"}, "max": {"cpu": "8"}},
                ],
            },
            {"name": "ops", "namespaces": ["team-b"], "min": {"cpu": "2"}, "max": {"cpu": "4"}},
        ),
        "kube-system",
    )
    use_cluster(cluster)
    tick(cluster=cluster)
    quotas = {q.name: q for q in Quota.objects.select_related("parent", "tenant")}
    assert quotas["research"].parent == quotas["ops"].parent  # both under the root
    assert quotas["research"].parent is not None
    assert quotas["research"].parent.parent is None
    assert (quotas["vision"].parent, quotas["vision"].namespaces) == (
        quotas["research"],
        ["team-a"],
    )
    assert quotas["vision"].tenant == quotas["nlp"].tenant == quotas["research"].tenant
    assert quotas["vision"].max == {"cpu": 8000}
    assert quotas["nlp"].kube_ref == "ElasticQuotaTree kube-system/default#nlp"
    assert quotas["nlp"].source == "kubernetes"
    # An edit of one node, and a node removed: applied at the next look (on a copy: the
    # store's objects are never mutated, their encoding is shared).
    obj = copy.deepcopy(fake.store.get("elasticquotatrees", "kube-system", "default"))
    research = obj["spec"]["root"]["children"][0]
    research["children"] = [research["children"][0]]  # nlp goes
    research["children"][0]["max"] = {"cpu": "10"}
    fake.store.update("elasticquotatrees", "kube-system", "default", obj)
    tick(cluster=cluster)
    assert Quota.objects.get(name="vision").max == {"cpu": 10000}
    assert not Quota.objects.filter(name="nlp").exists()
    assert Quota.objects.filter(name="ops").exists()


def test_a_rename_in_the_cluster_moves_the_namespace_to_the_new_name(
    fake: FakeKube, cluster: KubernetesCluster, use_cluster: Callable[[Any], None], live: None
) -> None:
    fake.create(
        EQ,
        elastic_quota("team-a", min={"cpu": "4"}, max={"cpu": "8"}, namespace="team-a"),
        "team-a",
    )
    use_cluster(cluster)
    tick(cluster=cluster)
    assert Quota.objects.get(name="team-a").namespaces == ["team-a"]
    # kubectl has no rename: a delete and a create of the same content under a new name.
    fake.store.delete(EQ, "team-a", "team-a")
    fake.create(
        EQ, elastic_quota("alpha", min={"cpu": "4"}, max={"cpu": "8"}, namespace="team-a"), "team-a"
    )
    tick(cluster=cluster)
    assert not Quota.objects.filter(name="team-a").exists()
    renamed = Quota.objects.get(name="alpha")
    assert (renamed.namespaces, renamed.kube_ref) == (["team-a"], "ElasticQuota team-a/alpha")


def test_a_parent_in_a_namespace_without_jobs_is_read(
    fake: FakeKube, cluster: KubernetesCluster, use_cluster: Callable[[Any], None], live: None
) -> None:
    """Koordinator's parents live anywhere (koordinator-system, say): the tree is read from
    every namespace, not only the managed ones (found running the walkthrough)."""
    fake.add_namespace("koordinator-system")
    parent = elastic_quota(
        "research",
        min={"cpu": "8"},
        max={"cpu": "16"},
        labels={"quota.scheduling.koordinator.sh/is-parent": "true"},
    )
    fake.create(EQ, parent, "koordinator-system")
    child = elastic_quota(
        "team-a", parent="research", min={"cpu": "4"}, max={"cpu": "8"}, namespace="team-a"
    )
    fake.create(EQ, child, "team-a")
    use_cluster(cluster)
    tick(cluster=cluster)
    team_a = Quota.objects.select_related("parent").get(name="team-a")
    assert team_a.parent is not None
    assert (team_a.parent.name, team_a.namespaces) == ("research", ["team-a"])


def test_the_available_queue_annotations_the_queue_writes_are_not_a_change(
    fake: FakeKube, reasons: list[str]
) -> None:
    assert set(namespacequeues.WRITTEN) <= kubeobjects.OWN_ANNOTATIONS
    own = dict.fromkeys(namespacequeues.FAMILY, "team-a/default")
    fake.store.patch("namespaces", None, "team-b", {"metadata": {"annotations": own}})
    # Then a configuration annotation on the same Namespace (same stream, so later).
    said = {"koord-queue/available-quota-in-namespace": "team-b"}
    fake.store.patch("namespaces", None, "team-b", {"metadata": {"annotations": said}})
    wait_until(lambda: "Namespace team-b modified" in reasons, timeout=10, interval=0.01)
    assert reasons.count("Namespace team-b modified") == 1, reasons


def test_without_wakes_the_watcher_follows_only_the_configuration(
    fake: FakeKube, cluster: KubernetesCluster, live: None
) -> None:
    """``KQ_WATCH_WAKES`` off (the cycle workers' own informers wake them): ``run_watch``
    lists and watches no jobs, nodes or pods -- a Job that arrives triggers nothing --
    yet an ElasticQuota's edit still does."""
    triggers: list[Mapping[str, int]] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=run_watch,
        args=(cluster, stop),
        kwargs={
            "trigger": triggers.append,
            "debounce_s": 0.05,
            "watch_timeout_s": 5,
            "wakes": False,
        },
        daemon=True,
    )
    thread.start()
    try:
        fake.create("jobs", job_manifest("arrived"), "team-a")
        marker = elastic_quota("marker", min={}, max={"cpu": "1"}, namespace="team-b")
        fake.create(EQ, marker, "team-b")
        # The ElasticQuota's event comes after the Job's in the store's history.
        wait_until(
            lambda: any("ElasticQuota marker added" in t for t in triggers),
            timeout=10,
            interval=0.01,
        )
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()
    assert not any(reason.startswith(("Job", "node", "capacity")) for t in triggers for reason in t)
    asked = {str(e.get("resource")).split(".")[0] for e in fake.log_entries(types=["request"])}
    assert EQ in asked  # listed and watched
    assert not asked & {"jobs", "nodes", "pods"}, asked
