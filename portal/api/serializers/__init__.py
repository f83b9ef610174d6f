"""Serializers: parse and check input, then call ONE action; render objects for answers.

One module per domain. Names follow the model (``Queue`` -> ``QueueSerializer``).
Related objects are named by their unique name, looked up among what the caller may
see. Every serializer rejects fields it does not know; fields that cannot change after
creation (``name``, ``tenant`` ...) are accepted on update only with their current
value, so a GET-edit-PUT round trip works while a rename attempt is an error.
"""

from portal.api.serializers.base import (
    POLICY_CHOICES,
    QUEUE_COUNTS,
    StrictMixin,
    StrictModelSerializer,
    StrictSerializer,
    active_users,
    actor_of,
    int32,
    queues_of,
    quotas_of,
    tenants_of,
)
from portal.api.serializers.cluster import (
    AuditEventSerializer,
    ClusterCapacitySerializer,
    ClusterQuotaSerializer,
    ClusterSerializer,
    CycleRunSerializer,
    MeSerializer,
)
from portal.api.serializers.nodes import (
    SimNodeSerializer,
    TaintSerializer,
)
from portal.api.serializers.preview import (
    NewQuotaPreviewSerializer,
    PreviewPlaceSerializer,
    PreviewQuotaSerializer,
    PreviewResultSerializer,
    PreviewSerializer,
    PreviewStateSerializer,
    PreviewWorkloadSerializer,
)
from portal.api.serializers.queues import (
    QueueSerializer,
)
from portal.api.serializers.quotas import (
    QuotaSerializer,
    QuotaTreeSerializer,
    new_quota_arguments,
)
from portal.api.serializers.tenancy import (
    MembershipSerializer,
    TenantSerializer,
)
from portal.api.serializers.tokens import (
    APITokenSerializer,
)
from portal.api.serializers.workloads import (
    WORKLOAD_ROW_VALUES,
    CancelSerializer,
    PendingWorkloadSerializer,
    PodSetSerializer,
    TolerationSerializer,
    WorkloadDetailSerializer,
    WorkloadEventSerializer,
    WorkloadSerializer,
    WorkloadSubmitSerializer,
    render_pod_sets,
    workload_list_row,
)

__all__ = [
    "POLICY_CHOICES",
    "QUEUE_COUNTS",
    "WORKLOAD_ROW_VALUES",
    "APITokenSerializer",
    "AuditEventSerializer",
    "CancelSerializer",
    "ClusterCapacitySerializer",
    "ClusterQuotaSerializer",
    "ClusterSerializer",
    "CycleRunSerializer",
    "MeSerializer",
    "MembershipSerializer",
    "NewQuotaPreviewSerializer",
    "PendingWorkloadSerializer",
    "PodSetSerializer",
    "PreviewPlaceSerializer",
    "PreviewQuotaSerializer",
    "PreviewResultSerializer",
    "PreviewSerializer",
    "PreviewStateSerializer",
    "PreviewWorkloadSerializer",
    "QueueSerializer",
    "QuotaSerializer",
    "QuotaTreeSerializer",
    "SimNodeSerializer",
    "StrictMixin",
    "StrictModelSerializer",
    "StrictSerializer",
    "TaintSerializer",
    "TenantSerializer",
    "TolerationSerializer",
    "WorkloadDetailSerializer",
    "WorkloadEventSerializer",
    "WorkloadSerializer",
    "WorkloadSubmitSerializer",
    "active_users",
    "actor_of",
    "int32",
    "new_quota_arguments",
    "queues_of",
    "quotas_of",
    "render_pod_sets",
    "tenants_of",
    "workload_list_row",
]
