from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal import webhooks
from portal.views import (
    admin_pages,
    cluster,
    fairness,
    metrics,
    pages,
    queues,
    quotas,
    tokens,
    workloads,
)

urlpatterns = [
    path("", pages.home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("switch/", pages.switch_tenant, name="switch-tenant"),
    path("tenants/<slug:name>/", pages.tenant_page, name="tenant"),
    path("tenants/<slug:name>/queues/new/", queues.queue_edit, name="queue-create"),
    path("tenants/<slug:name>/queues/<slug:queue>/", queues.queue_page, name="queue"),
    path("tenants/<slug:name>/queues/<slug:queue>/edit/", queues.queue_edit, name="queue-edit"),
    path("tenants/<slug:name>/workloads/<int:pk>/", workloads.workload_page, name="workload"),
    path(
        "tenants/<slug:name>/workloads/<int:pk>/cancel/",
        workloads.workload_cancel,
        name="workload-cancel",
    ),
    path("tenants/<slug:name>/quotas/new/", quotas.quota_create, name="quota-create"),
    path("tenants/<slug:name>/quotas/<slug:quota>/edit/", quotas.quota_edit, name="quota-edit"),
    path("tenants/<slug:name>/members/", admin_pages.members, name="members"),
    path("tenants/<slug:name>/audit/", admin_pages.audit, name="tenant-audit"),
    path("tenants/<slug:name>/fairness/", fairness.tenant_fairness, name="tenant-fairness"),
    path("fairness/", fairness.cluster_fairness, name="fairness"),
    path("cluster/", cluster.cluster_page, name="cluster"),
    path("cluster/quotas/new/", quotas.quota_create, name="cluster-quota-create"),
    path("cluster/quotas/<slug:quota>/edit/", quotas.quota_edit, name="cluster-quota-edit"),
    path("audit/", admin_pages.audit, name="audit"),
    path("tokens/", tokens.token_list, name="tokens"),
    path("metrics", metrics.metrics, name="metrics"),
    path("webhooks/mutate", webhooks.mutate, name="webhook-mutate"),
    path("admin/", admin.site.urls),
    path("api/", include("portal.api.urls")),
]

# The product's own error pages (templates/404.html, 403.html, 500.html); 500 also turns
# a database outage into a 503 (portal.outage).
handler500 = "portal.outage.server_error"
