"""Quotas managed here written as ElasticQuotas (issue 12 item 2), so that Koordinator's
scheduler enforces the tree edited here: created, patched, deleted with the quota,
labelled as Koordinator reads them; never read back as configuration; quotas managed in
Kubernetes and other owners' ElasticQuotas are left alone."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache

from queueing import actions, compat, kubeconfig, kubeobjects, kubequotas, quotawriteback
from queueing.admission import tick
from queueing.cluster.kubernetes import KubernetesCluster
from queueing.models import Quota
from tests.builders import SYSTEM
from tests.fakekube import FakeKube
from tests.kube.conftest import make_adapter
from tests.kube.test_import_kube_queue import elastic_quota

pytestmark = pytest.mark.django_db

EQ = "elasticquotas"
HOME = "koord-queue"


@pytest.fixture
def writing(settings: Any) -> Iterator[None]:
    settings.KQ_KUBE_WRITE_QUOTAS = True
    settings.KQ_KUBE_QUOTA_NAMESPACE = HOME
    settings.KQ_QUOTA_WRITEBACK_S = 0.0
    for key in (kubequotas.DIGEST_KEY, kubeconfig.DIGEST_KEY, kubeconfig.CHANGED_KEY):
        cache.delete(key)
    kubequotas._last.clear()
    kubeconfig._last.clear()
    yield
    kubequotas._last.clear()


@pytest.fixture
def cluster(fake: FakeKube) -> Iterator[KubernetesCluster]:
    for ns in ("team-a", "team-b", HOME):
        fake.add_namespace(ns)
    fake.add_node("n1", {"cpu": "32", "memory": "128Gi"})
    adapter = make_adapter(fake.url, namespaces=["team-a", "team-b"], kinds=["Job"])
    yield adapter
    adapter.api.close()


def tree() -> dict[str, Quota]:
    root = actions.create_quota(
        SYSTEM, name="root", tenant=None, parent=None, min={"cpu": "32"}, max={"cpu": "32"}
    )
    tenant = actions.create_tenant(SYSTEM, name="research")
    research = actions.create_quota(
        SYSTEM,
        name="research",
        tenant=tenant,
        parent=root,
        min={"cpu": "16"},
        max={"cpu": "24", "memory": "64Gi"},
        shared_weight={"cpu": "2"},
    )
    vision = actions.create_quota(
        SYSTEM,
        name="vision",
        tenant=tenant,
        parent=research,
        min={"cpu": "8"},
        max={"cpu": "16"},
        allow_lent=False,
        namespaces=["team-a"],
    )
    return {"root": root, "research": research, "vision": vision}


def objects(fake: FakeKube) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in fake.store.list(EQ, HOME)[0]}


def test_quotas_managed_here_become_elastic_quotas_as_koordinator_reads_them(
    fake: FakeKube, cluster: KubernetesCluster, writing: None, use_cluster: Callable[[Any], None]
) -> None:
    tree()
    use_cluster(cluster)
    tick(cluster=cluster)  # the sync's after-sync hook writes them
    written = objects(fake)
    assert sorted(written) == ["research", "vision"]  # the root is Koordinator's own
    research, vision = written["research"], written["vision"]
    assert research["metadata"]["labels"] == {
        kubeobjects.OWNER_LABEL: kubeobjects.OWNER,
        compat.QUOTA_PARENT_LABEL: "koordinator-root-quota",
        compat.QUOTA_IS_PARENT_LABEL: "true",
        compat.QUOTA_ALLOW_LENT_LABEL: "true",
    }
    assert research["spec"] == {"min": {"cpu": "16"}, "max": {"cpu": "24", "memory": "64Gi"}}
    assert json.loads(
        research["metadata"]["annotations"][compat.QUOTA_SHARED_WEIGHT_ANNOTATION]
    ) == {"cpu": "2"}
    assert vision["metadata"]["labels"][compat.QUOTA_PARENT_LABEL] == "research"
    assert vision["metadata"]["labels"][compat.QUOTA_IS_PARENT_LABEL] == "false"
    assert vision["metadata"]["labels"][compat.QUOTA_ALLOW_LENT_LABEL] == "false"
    assert json.loads(vision["metadata"]["annotations"][compat.QUOTA_NAMESPACES_ANNOTATION]) == [
        "team-a"
    ]
    # The runtime write-back annotates ours too.
    annotations = vision["metadata"]["annotations"]
    assert kubeobjects.RUNTIME_ANNOTATION in annotations, annotations
    # Nothing changed: nothing written.
    before = len(fake.log_entries(types=["request"]))
    assert kubequotas.publish(cluster) == 0
    assert not [
        e
        for e in fake.log_entries(types=["request"])[before:]
        if e["verb"] in ("create", "patch", "delete") and e.get("resource", "").startswith(EQ)
    ]


def test_an_edit_here_patches_the_object_and_a_deletion_deletes_it(
    fake: FakeKube, cluster: KubernetesCluster, writing: None
) -> None:
    quotas = tree()
    assert kubequotas.publish(cluster) == 2
    # memory dropped from max, cpu raised: the object follows (memory removed, not kept).
    actions.update_quota(SYSTEM, quotas["research"], max={"cpu": "28"})
    assert kubequotas.publish(cluster) == 1
    assert objects(fake)["research"]["spec"]["max"] == {"cpu": "28"}
    # A label someone else put on our object stays; the ones we decide are put right.
    fake.store.patch(
        EQ,
        HOME,
        "vision",
        {"metadata": {"labels": {"team": "cv", compat.QUOTA_ALLOW_LENT_LABEL: "true"}}},
    )
    kubequotas._last.clear()  # the periodic full check is due
    assert kubequotas.publish(cluster) == 1
    labels = objects(fake)["vision"]["metadata"]["labels"]
    assert (labels["team"], labels[compat.QUOTA_ALLOW_LENT_LABEL]) == ("cv", "false")
    # Deleted here: deleted there.
    actions.delete_quota(SYSTEM, Quota.objects.get(name="vision"))
    assert kubequotas.publish(cluster) == 2  # vision deleted, research no longer a parent
    assert sorted(objects(fake)) == ["research"]
    assert objects(fake)["research"]["metadata"]["labels"][compat.QUOTA_IS_PARENT_LABEL] == "false"
    # Someone deletes ours in the cluster: made again at the next full check.
    fake.store.delete(EQ, HOME, "research")
    kubequotas._last.clear()
    assert kubequotas.publish(cluster) == 1
    assert sorted(objects(fake)) == ["research"]


def test_quotas_managed_in_kubernetes_and_other_owners_objects_are_left_alone(
    fake: FakeKube,
    cluster: KubernetesCluster,
    writing: None,
    settings: Any,
    use_cluster: Callable[[Any], None],
) -> None:
    settings.KQ_KUBE_LIVE_CONFIG = True
    settings.KQ_KUBE_CONFIG_SYNC_S = 0.0
    quotas = tree()
    # An ElasticQuota of the cluster for team-b: imported, managed in Kubernetes.
    fake.create(
        EQ,
        elastic_quota("team-b", min={"cpu": "2"}, max={"cpu": "4"}, namespace="team-b"),
        "team-b",
    )
    # And one named like a quota managed here, not ours: not touched.
    fake.create(EQ, elastic_quota("vision", min={}, max={"cpu": "1"}, namespace="team-a"), "team-a")
    use_cluster(cluster)
    tick(cluster=cluster)
    assert Quota.objects.get(name="team-b").source == "kubernetes"
    assert sorted(objects(fake)) == ["research"]  # not team-b (theirs), not vision (taken)
    assert fake.store.get(EQ, "team-a", "vision")["spec"]["max"] == {"cpu": "1"}
    # Ours never read back as configuration: research stays managed here, its values ours.
    cache.delete(kubeconfig.DIGEST_KEY)
    report = kubeconfig.sync_config(cluster)
    assert report is not None
    assert not [i for i in report.items if "research" in i.what], report.lines()
    research = Quota.objects.get(name="research")
    assert (research.source, research.max) == ("here", quotas["research"].max)
    # The write-back writes the runtime quota on theirs (mirrored) and ours alike.
    Quota.objects.filter(name__in=["team-b", "research"]).update(runtime={"cpu": 1000})
    cache.clear()
    quotawriteback._written_at.clear()
    assert quotawriteback.publish(cluster) >= 2
    for namespace, name in (("team-b", "team-b"), (HOME, "research")):
        notes = fake.store.get(EQ, namespace, name)["metadata"]["annotations"]
        assert json.loads(notes[kubeobjects.RUNTIME_ANNOTATION]) == {"cpu": "1"}


def test_it_is_off_unless_asked_for(fake: FakeKube, cluster: KubernetesCluster, settings: Any):
    settings.KQ_KUBE_WRITE_QUOTAS = False
    tree()
    assert kubequotas.publish(cluster) == 0
    assert objects(fake) == {}


def test_under_an_is_root_tree_ours_carry_its_tree_id(
    fake: FakeKube,
    cluster: KubernetesCluster,
    writing: None,
    settings: Any,
    use_cluster: Callable[[Any], None],
) -> None:
    """Koordinator's multi-tree quotas: a tree's root is an ElasticQuota labelled is-root
    with a tree-id, and every quota of the tree carries that tree-id."""
    settings.KQ_KUBE_LIVE_CONFIG = True
    settings.KQ_KUBE_CONFIG_SYNC_S = 0.0
    tree_labels = {compat.QUOTA_IS_ROOT_LABEL: "true", compat.QUOTA_TREE_ID_LABEL: "gpu"}
    fake.create(
        EQ,
        elastic_quota(
            "gpu-pool", min={"cpu": "8"}, max={"cpu": "8"}, labels=tree_labels, namespace="team-b"
        ),
        "team-b",
    )
    fake.create(
        EQ,
        elastic_quota(
            "gpu-team",
            parent="gpu-pool",
            min={"cpu": "4"},
            max={"cpu": "8"},
            labels={compat.QUOTA_TREE_ID_LABEL: "gpu", compat.QUOTA_IS_PARENT_LABEL: "true"},
            namespace="team-b",
        ),
        "team-b",
    )
    use_cluster(cluster)
    tick(cluster=cluster)
    team = Quota.objects.get(name="gpu-team")
    assert team.source == "kubernetes"
    actions.create_quota(
        SYSTEM,
        name="gpu-interns",
        tenant=team.tenant,
        parent=team,
        min={},
        max={"cpu": "2"},
        namespaces=["team-a"],
    )
    kubequotas._last.clear()
    cache.delete(kubequotas.DIGEST_KEY)
    assert kubequotas.publish(cluster) == 1
    labels = objects(fake)["gpu-interns"]["metadata"]["labels"]
    assert labels[compat.QUOTA_PARENT_LABEL] == "gpu-team"
    assert labels[compat.QUOTA_TREE_ID_LABEL] == "gpu"
