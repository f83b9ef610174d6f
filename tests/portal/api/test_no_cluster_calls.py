"""Pages, the API and what-if previews read the cycle's node view, never the cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from queueing import admission, nodeview, whatif
from queueing.cluster import get_cluster, set_cluster
from queueing.models import ClusterNode
from tests.builders import submit
from tests.portal.api.conftest import ApiWorld
from tests.sites import Site


class ForbiddenCluster:
    """A cluster that fails the test on any use, and remembers what was asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        raise AssertionError(f"the cluster was called: {name}")


@pytest.fixture
def forbidden() -> Iterator[ForbiddenCluster]:
    stub = ForbiddenCluster()
    set_cluster(stub)
    yield stub
    set_cluster(None)


def test_the_stub_catches_a_cluster_call(db: None, forbidden: ForbiddenCluster) -> None:
    # Positive control: a caller going to the cluster is caught.
    with pytest.raises(AssertionError, match="the cluster was called: nodes"):
        get_cluster().nodes()
    assert forbidden.calls == ["nodes"]


def test_pages_read_the_node_view_without_calling_the_cluster(site: Site) -> None:
    w = submit(site.world, "train-1", cpu="2")
    admission.tick(cluster=site.world.cluster, now=site.world.clock())  # persists the node view
    ClusterNode.objects.filter(name="node-1").update(labels={"koord-queue/pool": "from-view"})
    stub = ForbiddenCluster()
    set_cluster(stub)
    c = site.client("root")
    t = site.tenant.name
    for url in [
        "/",
        f"/tenants/{t}/",
        f"/tenants/{t}/queues/{site.queue.name}/",
        f"/tenants/{t}/workloads/{w.pk}/",
        f"/tenants/{t}/quotas/{site.quota.name}/edit/",
        "/cluster/",
        "/cluster/?partial=live",
        f"/cluster/quotas/{site.world.root.name}/edit/",
    ]:
        response = c.get(url)
        assert response.status_code == 200, (url, response.status_code)
    assert stub.calls == []
    # What the page shows is the stored view (the pool label set only there).
    assert b"from-view" in c.get("/cluster/").content


def test_api_and_previews_read_the_node_view(api: ApiWorld) -> None:
    admission.tick(cluster=api.w.cluster, now=api.w.clock())
    stored = nodeview.read()
    assert [n.name for n in stored] == ["node-1", "node-2"]
    stub = ForbiddenCluster()
    set_cluster(stub)
    body = api.call("cluster_admin", "get", "/api/v1/cluster/").json()
    assert body["capacity"]["allocatable"]["cpu"] == "16"
    for url in ("/api/v1/quotas/", "/api/v1/workloads/", "/api/v1/sim/nodes/"):
        assert api.call("cluster_admin", "get", url).status_code == 200, url
    response = api.call(
        "cluster_admin", "post", "/api/v1/preview/", {"quota": "team-a-train", "max": {"cpu": "12"}}
    )
    assert response.status_code == 200, response.json()
    preview = whatif.preview_quota_change(api.train, {"max": {"cpu": "10"}})
    assert preview.quotas
    assert stub.calls == []
