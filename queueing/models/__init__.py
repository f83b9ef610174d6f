"""Koord-Queue's stored state. Writes go through queueing.actions or the cycle's apply()."""

from queueing.models.audit import AuditEvent
from queueing.models.cycle import CycleLease, CycleRun, MetricCounter
from queueing.models.ledger import UsageLedger, UsageSample
from queueing.models.nodeview import ClusterNode
from queueing.models.queue import Queue
from queueing.models.quota import Quota
from queueing.models.simcluster import SimJob, SimNode
from queueing.models.tenancy import Membership, Tenant
from queueing.models.workload import Workload, WorkloadEvent

__all__ = [
    "AuditEvent",
    "ClusterNode",
    "CycleLease",
    "CycleRun",
    "Membership",
    "MetricCounter",
    "Queue",
    "Quota",
    "SimJob",
    "SimNode",
    "Tenant",
    "UsageLedger",
    "UsageSample",
    "Workload",
    "WorkloadEvent",
]
