"""Viewsets of the REST API, one module per domain. Each reads through a
visibility-filtered queryset (another tenant's object is a 404), checks the caller's role
with queueing.access, and writes by calling one action through its serializer."""

from portal.api.views.base import (
    BaseViewSet,
    StableOrderingFilter,
    VersionedMixin,
    actor,
)
from portal.api.views.cluster import (
    ClusterView,
)
from portal.api.views.history import (
    AuditEventViewSet,
    CycleRunViewSet,
)
from portal.api.views.me import (
    MeView,
)
from portal.api.views.nodes import (
    SimNodeViewSet,
)
from portal.api.views.preview import (
    PreviewView,
    filter_preview,
    may_create_quota,
)
from portal.api.views.queues import (
    QueueViewSet,
)
from portal.api.views.quotas import (
    QuotaViewSet,
)
from portal.api.views.tenancy import (
    MembershipViewSet,
    TenantViewSet,
)
from portal.api.views.tokens import (
    APITokenViewSet,
)
from portal.api.views.workloads import (
    WorkloadViewSet,
)

__all__ = [
    "APITokenViewSet",
    "AuditEventViewSet",
    "BaseViewSet",
    "ClusterView",
    "CycleRunViewSet",
    "MeView",
    "MembershipViewSet",
    "PreviewView",
    "QueueViewSet",
    "QuotaViewSet",
    "SimNodeViewSet",
    "StableOrderingFilter",
    "TenantViewSet",
    "VersionedMixin",
    "WorkloadViewSet",
    "actor",
    "filter_preview",
    "may_create_quota",
]
