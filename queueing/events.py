"""Payloads for the live stream, and publishing them after the transaction commits.

Every message is sent to the channel-layer group of one tenant (``tenant.<id>``); the
WebSocket consumers only authorise and forward. Message schema (docs/events.md):

    {"type": "workloads", "tenant": <id>, "cycle": <id or null>, "at": <iso8601>,
     "changes": [<workload row>...], "removed": [<workload id>...]}

    {"type": "quotas", "tenant": <id>, "cycle": <id or null>, "at": <iso8601>,
     "quotas": [{"id", "name", "runtime", "used", "min", "max"}...]}

A workload row carries the fields a queue page shows: id, name, namespace, queue,
queue_id, quota, quota_id, phase, priority, position, global_position, eta_p50, eta_p90,
reason, queue_order_at, admitted_at, started_at, finished_at. ``changes`` holds only
workloads that changed; ``removed`` lists workloads that left the live lists.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.utils import timezone

from queueing.choices import TERMINAL_PHASES

log = logging.getLogger(__name__)

ROW_FIELDS = (
    "id",
    "name",
    "namespace",
    "queue_id",
    "quota_id",
    "tenant_id",
    "phase",
    "priority",
    "position",
    "global_position",
    "eta_p50",
    "eta_p90",
    "reason",
    "queue_order_at",
    "admitted_at",
    "started_at",
    "finished_at",
)


def group_name(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


ALL_GROUP = "tenant.all"  # cluster admins watching every tenant


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def workload_row(values: Mapping[str, Any], names: Mapping[str, Mapping[int, str]]) -> dict:
    """The wire form of one workload. ``names`` maps queue/quota ids to names."""
    return {
        "id": values["id"],
        "name": values["name"],
        "namespace": values["namespace"],
        "queue_id": values["queue_id"],
        "queue": names.get("queue", {}).get(values["queue_id"], ""),
        "quota_id": values["quota_id"],
        "quota": names.get("quota", {}).get(values["quota_id"], ""),
        "phase": values["phase"],
        "priority": values["priority"],
        "position": values["position"],
        "global_position": values["global_position"],
        "eta_p50": _iso(values["eta_p50"]),
        "eta_p90": _iso(values["eta_p90"]),
        "reason": values["reason"],
        "queue_order_at": _iso(values["queue_order_at"]),
        "admitted_at": _iso(values["admitted_at"]),
        "started_at": _iso(values["started_at"]),
        "finished_at": _iso(values["finished_at"]),
    }


def send(tenant_id: int, payload: dict) -> None:
    """Deliver now. Use publish_on_commit from code that writes."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "kq.event", "payload": payload}
    try:
        async_to_sync(layer.group_send)(group_name(tenant_id), message)
        async_to_sync(layer.group_send)(ALL_GROUP, message)
    except Exception:  # the stream is best effort; the database is the truth
        log.exception("could not publish a live event for tenant %s", tenant_id)


def publish_on_commit(tenant_id: int, payload: dict) -> None:
    """Send after the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: send(tenant_id, payload))


def publish_workload_changes(
    rows: Iterable[Mapping[str, Any]],
    names: Mapping[str, Mapping[int, str]],
    *,
    cycle_id: int | None = None,
) -> None:
    """Group changed workload rows by tenant and publish one message each, on commit."""
    by_tenant: dict[int, list[dict]] = defaultdict(list)
    removed: dict[int, list[int]] = defaultdict(list)
    for values in rows:
        tenant_id = int(values["tenant_id"])
        by_tenant[tenant_id].append(workload_row(values, names))
        if values["phase"] in TERMINAL_PHASES:
            removed[tenant_id].append(int(values["id"]))
    at = timezone.now().isoformat()
    for tenant_id, changes in by_tenant.items():
        publish_on_commit(
            tenant_id,
            {
                "type": "workloads",
                "tenant": tenant_id,
                "cycle": cycle_id,
                "at": at,
                "changes": changes,
                "removed": removed.get(tenant_id, []),
            },
        )
