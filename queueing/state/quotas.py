"""Per quota after a cycle: the usage ledger, usage samples, runtime quota and usage."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from queueing import events
from queueing.engine import ledger as engine_ledger
from queueing.engine.types import (
    CycleResult,
    EngineConfig,
)
from queueing.models import (
    Quota,
    UsageLedger,
    UsageSample,
)
from queueing.state.snapshot import SnapshotIndex

log = logging.getLogger(__name__)

SAMPLE_EVERY = timedelta(seconds=60)


def charge_ledgers(result: CycleResult, index: SnapshotIndex, config: EngineConfig) -> None:
    admitted_by_quota: dict[str, dict[str, int]] = defaultdict(dict)
    for admission in result.admissions:
        row = index.rows[admission.workload_id]
        request = _total(row["pod_sets"])
        bucket = admitted_by_quota[admission.quota]
        for resource, amount in request.items():
            bucket[resource] = bucket.get(resource, 0) + amount
    leaves = index.leaves
    ledger_ids = dict(index.ledger_ids)
    if leaves - set(ledger_ids):
        # A ledger the snapshot did not see may have been made since (a first cycle).
        ledger_ids.update(
            (index.quota_names[quota_id], ledger_id)
            for quota_id, ledger_id in UsageLedger.objects.filter(
                quota_id__in=[index.quota_ids[n] for n in leaves - set(ledger_ids)]
            ).values_list("quota_id", "id")
        )
    updates: list[tuple[int, dict[str, float]]] = []
    for name in sorted(leaves):
        usage, updated = index.ledgers.get(name, ({}, None))
        elapsed = (index.now - updated).total_seconds() if updated else 0.0
        used = result.used.get(name)
        values = engine_ledger.charge(
            usage,
            dict(used.raw) if used is not None else {},
            elapsed,
            config.usage_half_life_s,
            admitted=admitted_by_quota.get(name),
            entry_penalty_s=config.entry_penalty_s,
        )
        ledger_id = ledger_ids.get(name)
        if ledger_id is not None:
            updates.append((ledger_id, values))
        else:
            UsageLedger.objects.create(
                quota_id=index.quota_ids[name], usage=values, updated_at=index.now
            )
    # One statement for every ledger of the tree.
    _update_json(
        UsageLedger._meta.db_table,
        ("usage",),
        ("updated_at",),
        [(ledger_id, (usage,), (index.now,)) for ledger_id, usage in updates],
    )


def _update_json(
    table: str,
    json_columns: Sequence[str],
    time_columns: Sequence[str],
    rows: Sequence[tuple[int, Sequence[Any], Sequence[datetime]]],
) -> None:
    """UPDATE ``table`` by id, one executemany: JSON columns then datetime columns."""
    if not rows:
        return
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    sets = [f"{c} = %s{cast}" for c in json_columns] + [f"{c} = %s" for c in time_columns]
    sql = f"UPDATE {table} SET {', '.join(sets)} WHERE id = %s"  # noqa: S608
    to_db = connection.ops.adapt_datetimefield_value
    params = [
        (*(json.dumps(v) for v in values), *(to_db(t) for t in times), row_id)
        for row_id, values, times in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def _total(pod_sets: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for ps in pod_sets:
        for resource, amount in (ps.get("requests") or {}).items():
            total[resource] = total.get(resource, 0) + int(amount) * int(ps.get("count", 1))
    return total


def sample_usage(result: CycleResult, index: SnapshotIndex) -> None:
    latest = (
        UsageSample.objects.filter(quota_id__in=list(index.quota_ids.values()))
        .order_by("-at")
        .values_list("at", flat=True)
        .first()
    )
    if latest is not None and index.now - latest < SAMPLE_EVERY:
        return
    ledgers = dict(
        UsageLedger.objects.filter(quota_id__in=list(index.quota_ids.values())).values_list(
            "quota_id", "usage"
        )
    )
    UsageSample.objects.bulk_create(
        UsageSample(
            quota_id=quota_id,
            at=index.now,
            decayed=ledgers.get(quota_id, {}),
            used=result.used[name].to_dict() if name in result.used else {},
            runtime=result.runtime_quota[name].to_dict() if name in result.runtime_quota else {},
        )
        for name, quota_id in index.quota_ids.items()
    )
    UsageSample.objects.filter(at__lt=index.now - timedelta(days=14)).delete()


def store_quota_state(result: CycleResult, index: SnapshotIndex) -> list[dict[str, Any]]:
    """Keep each quota's runtime quota and usage on its row; return the ones that moved."""
    changed: list[dict[str, Any]] = []
    rows = index.quota_rows.values() or Quota.objects.filter(
        id__in=list(index.quota_ids.values())
    ).values("id", "name", "tenant_id", "runtime", "used", "min", "max")
    for row in rows:
        runtime = (
            result.runtime_quota[row["name"]].to_dict()
            if row["name"] in result.runtime_quota
            else {}
        )
        used = result.used[row["name"]].to_dict() if row["name"] in result.used else {}
        if runtime == row["runtime"] and used == row["used"]:
            continue
        changed.append({**row, "runtime": runtime, "used": used})
    # One statement for every quota that moved.
    _update_json(
        Quota._meta.db_table,
        ("runtime", "used"),
        (),
        [(row["id"], (row["runtime"], row["used"]), ()) for row in changed],
    )
    return changed


def publish_quotas(changed: Sequence[Mapping[str, Any]], cycle_id: int) -> None:
    """The quotas whose runtime quota or usage moved, in the configuration messages'
    shape; a cluster quota's (no tenant) go to the cluster admins only."""
    by_tenant: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    for row in changed:
        by_tenant[row["tenant_id"]].append(
            {key: row[key] for key in ("id", "name", "runtime", "used", "min", "max")}
        )
    for tenant_id, quotas in by_tenant.items():
        events.publish_on_commit(
            tenant_id, events.config_message("quotas", tenant_id, quotas, cycle_id=cycle_id)
        )
