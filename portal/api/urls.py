"""Routes of /api/v1/ (and the schema and its docs under /api/)."""

from __future__ import annotations

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny
from rest_framework.routers import DefaultRouter

from portal.api import views
from portal.api.errors import not_found

router = DefaultRouter()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("memberships", views.MembershipViewSet, basename="membership")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("queues", views.QueueViewSet, basename="queue")
router.register("workloads", views.WorkloadViewSet, basename="workload")
router.register("cycles", views.CycleRunViewSet, basename="cyclerun")
router.register("audit", views.AuditEventViewSet, basename="auditevent")
router.register("tokens", views.APITokenViewSet, basename="apitoken")
router.register("sim/nodes", views.SimNodeViewSet, basename="simnode")

app_name = "api"
urlpatterns = [
    path("v1/", include(router.urls)),
    path("v1/cluster/", views.ClusterView.as_view(), name="cluster"),
    path("v1/preview/", views.PreviewView.as_view(), name="preview"),
    path("v1/me/", views.MeView.as_view(), name="me"),
    path("schema/", SpectacularAPIView.as_view(permission_classes=[AllowAny]), name="schema"),
    path(
        "docs/",
        SpectacularSwaggerView.as_view(url_name="api:schema", permission_classes=[AllowAny]),
        name="docs",
    ),
    re_path(r"", not_found),  # whatever else is under /api/, newlines included
]
