"""Every change to Koord-Queue's state goes through here (or the cycle's apply()).

One module per domain; each action checks, writes inside one transaction, records an
AuditEvent with the state before and after, and publishes what changed only after the
transaction commits. Views, serializers, forms, tasks and commands call actions; they
never save models themselves. (API tokens belong to the web layer: portal/tokens.py.)

Callers import from the package (``from queueing.actions import update_quota``); the
modules are where the code lives.
"""

from queueing.actions.base import (
    AUDITED_FIELDS,
    ActionError,
    Actor,
    ConflictError,
    audit,
    check_version,
    snapshot_of,
    stale_message,
)
from queueing.actions.kubernetes import set_kube_ref
from queueing.actions.nodes import delete_sim_node, upsert_sim_node
from queueing.actions.queues import QUEUE_EDITABLE, create_queue, delete_queue, update_queue
from queueing.actions.quotas import (
    QUOTA_EDITABLE,
    create_quota,
    delete_quota,
    new_quota_proposal,
    quota_proposal,
    update_quota,
)
from queueing.actions.tenancy import (
    create_tenant,
    delete_tenant,
    remove_membership,
    set_membership,
    update_tenant,
)
from queueing.actions.transitions import Made, Move, Outcome, one_statement, transition_many
from queueing.actions.workloads import (
    cancel_workload,
    parse_pod_sets,
    quota_for_namespace,
    register_cluster_workload,
    register_cluster_workloads,
    resolve_placement,
    submit_workload,
    total_request,
    transition,
    workload_ref,
)

__all__ = [
    "AUDITED_FIELDS",
    "QUEUE_EDITABLE",
    "QUOTA_EDITABLE",
    "ActionError",
    "Actor",
    "ConflictError",
    "Made",
    "Move",
    "Outcome",
    "audit",
    "cancel_workload",
    "check_version",
    "create_queue",
    "create_quota",
    "create_tenant",
    "delete_queue",
    "delete_quota",
    "delete_sim_node",
    "delete_tenant",
    "new_quota_proposal",
    "one_statement",
    "parse_pod_sets",
    "quota_for_namespace",
    "quota_proposal",
    "register_cluster_workload",
    "register_cluster_workloads",
    "remove_membership",
    "resolve_placement",
    "set_kube_ref",
    "set_membership",
    "snapshot_of",
    "stale_message",
    "submit_workload",
    "total_request",
    "transition",
    "transition_many",
    "update_queue",
    "update_quota",
    "update_tenant",
    "upsert_sim_node",
    "workload_ref",
]
