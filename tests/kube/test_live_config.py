"""ElasticQuotas and Queues as live configuration (issue 12, item 2): edits, deletions and
new objects in the cluster reach the tree at the next sync; the pages and the API refuse
to edit what Kubernetes manages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import cache

from queueing import actions, kubeconfig
from queueing.actions import Actor
from queueing.admission import tick
from queueing.choices import Source
from queueing.models import Queue, Quota
from tests.fakekube import FakeKube
from tests.kube.conftest import make_adapter
from tests.kube.test_import_kube_queue import elastic_quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def live(settings: Any) -> None:
    settings.KQ_KUBE_LIVE_CONFIG = True
    settings.KQ_KUBE_CONFIG_SYNC_S = 0.0
    cache.delete(kubeconfig.DIGEST_KEY)
    kubeconfig._last.clear()


def test_an_elastic_quota_edit_reaches_the_tree_at_the_next_sync(
    fake: FakeKube, use_cluster: Callable[[Any], None], live: None
) -> None:
    for ns in ("team-a", "team-b"):
        fake.add_namespace(ns)
    fake.add_node("n1", {"cpu": "16", "memory": "64Gi"})
    fake.create(
        "elasticquotas",
        elastic_quota("team-a", min={"cpu": "4"}, max={"cpu": "8"}, namespace="team-a"),
        "team-a",
    )
    cluster = make_adapter(fake.url, namespaces=["team-a", "team-b"], kinds=["Job"])
    use_cluster(cluster)
    tick(cluster=cluster)
    quota = Quota.objects.get(name="team-a")
    assert (quota.max, quota.source) == ({"cpu": 8000}, "kubernetes")
    # The pages and the API cannot edit it: the object is the place (GitOps).
    with pytest.raises(actions.ActionError, match="managed in Kubernetes"):
        actions.update_quota(Actor(None, Source.API, "ann"), quota, max={"cpu": "2"})
    # An edit of the object, a new one, and nothing else: applied at the next sync.
    obj = fake.store.get("elasticquotas", "team-a", "team-a")
    fake.store.update(
        "elasticquotas", "team-a", "team-a", {**obj, "spec": {**obj["spec"], "max": {"cpu": "12"}}}
    )
    fake.create(
        "elasticquotas",
        elastic_quota("team-b", min={"cpu": "2"}, max={"cpu": "4"}, namespace="team-b"),
        "team-b",
    )
    tick(cluster=cluster)
    assert Quota.objects.get(name="team-a").max == {"cpu": 12000}
    assert Quota.objects.get(name="team-b").namespaces == ["team-b"]
    # Nothing changed: the next look applies nothing (no audit, no writes).
    assert kubeconfig.sync_config(cluster) is None
    # Deleted in the cluster, unused here: deleted here too, with its own default queue.
    fake.store.delete("elasticquotas", "team-b", "team-b")
    tick(cluster=cluster)
    assert not Quota.objects.filter(name="team-b").exists()
    assert not Queue.objects.filter(name="team-b").exists()
    assert Quota.objects.filter(name="team-a").exists()
    cluster.api.close()


def test_it_is_off_unless_asked_for(fake: FakeKube, use_cluster: Callable[[Any], None]) -> None:
    fake.add_namespace("team-a")
    fake.create(
        "elasticquotas",
        elastic_quota("team-a", min={"cpu": "4"}, max={"cpu": "8"}, namespace="team-a"),
        "team-a",
    )
    cluster = make_adapter(fake.url, namespaces=["team-a"], kinds=["Job"])
    use_cluster(cluster)
    kubeconfig._last.clear()
    tick(cluster=cluster)
    assert not Quota.objects.filter(name="team-a").exists()
    cluster.api.close()
