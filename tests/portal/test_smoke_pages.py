from tests.builders import submit


def test_every_page_renders_for_a_cluster_admin(site):
    w = submit(site.world, "train-1", cpu="2")
    c = site.client("root")
    t = site.tenant.name
    for url in [
        "/",
        f"/tenants/{t}/",
        f"/tenants/{t}/queues/{site.queue.name}/",
        f"/tenants/{t}/workloads/{w.pk}/",
        f"/tenants/{t}/quotas/new/",
        f"/tenants/{t}/quotas/{site.quota.name}/edit/",
        f"/tenants/{t}/queues/new/",
        f"/tenants/{t}/queues/{site.queue.name}/edit/",
        f"/tenants/{t}/members/",
        f"/tenants/{t}/audit/",
        "/cluster/",
        "/cluster/quotas/new/",
        f"/cluster/quotas/{site.world.root.name}/edit/",
        "/audit/",
    ]:
        response = c.get(url)
        assert response.status_code == 200, (url, response.status_code)
