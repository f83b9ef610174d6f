"""Per quota after a cycle: the usage ledger, usage samples, runtime quota and usage."""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from queueing import events, world
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
from queueing.state import batch
from queueing.state.snapshot import SnapshotIndex

log = logging.getLogger(__name__)

SAMPLE_EVERY = timedelta(seconds=60)


def charge_ledgers(
    result: CycleResult,
    index: SnapshotIndex,
    config: EngineConfig,
    into: list[batch.Statement] | None = None,
) -> dict[int, dict[str, float]]:
    """Charge the leaves' usage ledgers (one statement; on PostgreSQL appended to ``into``
    for the caller to send, when given); returns the new usage by quota id."""
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
    charged: dict[int, dict[str, float]] = {}
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
        charged[index.quota_ids[name]] = values
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
        into,
    )
    return charged


def _update_json(
    table: str,
    json_columns: Sequence[str],
    time_columns: Sequence[str],
    rows: Sequence[tuple[int, Sequence[Any], Sequence[datetime]]],
    into: list[batch.Statement] | None = None,
) -> None:
    """UPDATE ``table`` by id, JSON columns then datetime columns: one statement for all
    the rows (PostgreSQL: ``UPDATE ... FROM (VALUES ...)``, appended to ``into`` when
    given, for the caller to send with others; elsewhere one executemany, here)."""
    if not rows:
        return
    to_db = connection.ops.adapt_datetimefield_value
    params = [
        (*(json.dumps(v) for v in values), *(to_db(t) for t in times), row_id)
        for row_id, values, times in rows
    ]
    q = connection.ops.quote_name
    columns = [*json_columns, *time_columns]
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            sets = ", ".join(f"{q(c)} = %s" for c in columns)
            sql = f"UPDATE {q(table)} SET {sets} WHERE id = %s"  # noqa: S608
            cursor.executemany(sql, params)
        return
    casts = [*("jsonb" for _ in json_columns), *("timestamptz" for _ in time_columns)]
    values = "(" + ", ".join([*(f"%s::{cast}" for cast in casts), "%s::bigint"]) + ")"
    names = ", ".join(q(f"v_{c}") for c in [*columns, "id"])
    sets = ", ".join(f"{q(c)} = v.{q('v_' + c)}" for c in columns)
    sql = (
        # Identifiers from the models' meta, quoted; every value is a parameter.
        f"UPDATE {q(table)} SET {sets} FROM (VALUES {', '.join([values] * len(params))}) "  # noqa: S608
        f"AS v({names}) WHERE {q(table)}.{q('id')} = v.{q('v_id')}"
    )
    statement = batch.Statement(sql, [value for row in params for value in row])
    if into is not None:
        into.append(statement)
    else:
        batch.run([statement])


def _total(pod_sets: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for ps in pod_sets:
        for resource, amount in (ps.get("requests") or {}).items():
            total[resource] = total.get(resource, 0) + int(amount) * int(ps.get("count", 1))
    return total


PRUNE_EVERY_S = 3600.0  # old samples are deleted at most this often per process
_pruned_at: list[float] = [-PRUNE_EVERY_S]


def sample_usage(
    result: CycleResult, index: SnapshotIndex, charged: Mapping[int, Mapping[str, float]]
) -> None:
    """Every SAMPLE_EVERY, one usage sample per quota of the tree (one insert). The time
    of the last one is remembered per process (``world.notes``) and read again only once
    it is due (another worker may have sampled since); ``charged``: the ledgers this
    cycle wrote (the others as the snapshot read them)."""
    notes = world.notes[index.root]
    latest = notes.get("sampled_at")
    if latest is None or index.now - latest >= SAMPLE_EVERY:
        latest = (
            UsageSample.objects.filter(quota_id__in=list(index.quota_ids.values()))
            .order_by("-at")
            .values_list("at", flat=True)
            .first()
        )
        notes["sampled_at"] = latest
    if latest is not None and index.now - latest < SAMPLE_EVERY:
        return
    UsageSample.objects.bulk_create(
        UsageSample(
            quota_id=quota_id,
            at=index.now,
            decayed=dict(
                charged[quota_id] if quota_id in charged else index.ledgers.get(name, ({}, None))[0]
            ),
            used=result.used[name].to_dict() if name in result.used else {},
            runtime=result.runtime_quota[name].to_dict() if name in result.runtime_quota else {},
        )
        for name, quota_id in index.quota_ids.items()
    )
    now = index.now
    transaction.on_commit(lambda: notes.__setitem__("sampled_at", now))
    if time.monotonic() - _pruned_at[0] >= PRUNE_EVERY_S:
        UsageSample.objects.filter(at__lt=index.now - timedelta(days=14)).delete()
        _pruned_at[0] = time.monotonic()


def store_quota_state(
    result: CycleResult, index: SnapshotIndex, into: list[batch.Statement] | None = None
) -> list[dict[str, Any]]:
    """Keep each quota's runtime quota and usage on its row (one statement; on PostgreSQL
    appended to ``into`` when given); return the ones that moved."""
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
        into,
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
