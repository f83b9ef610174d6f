"""Registering jobs found in the cluster: PostgreSQL's one statement
(``queueing.actions.registration``) writes what Django's bulk inserts write."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from queueing import actions
from queueing.actions import registration
from queueing.actions.base import Actor
from queueing.actions.workloads import _record_new, _workload_values
from queueing.cluster.base import JobRef
from queueing.models import AuditEvent, Workload, WorkloadEvent

# What differs between two registrations of the same job under two names.
OWN = {"id", "name", "object_uid", "created_at", "updated_at"}
RECORD = ("at", "actor_id", "actor_name", "source", "action", "object_type", "tenant_id", "before")


START = timezone.now() - timedelta(minutes=5)


def _items(world: Any, prefix: str, start: Any = START) -> list[dict[str, Any]]:
    common = {"tenant": world.tenant, "quota": world.quota, "queue": world.queue}
    return [
        {
            **common,
            "ref": JobRef("Job", "batch/v1", "team-a", f"{prefix}-small", f"{prefix}-u1"),
            "pod_sets": [
                {
                    "name": "main",
                    "count": 2,
                    "requests": {"cpu": 1000},
                    "node_selector": {},
                    "tolerations": [],
                }
            ],
            "priority": 50,
            "priority_class": "",
            "expected_runtime_s": 0.2,
            "labels": {"koord-queue/queue-name": "team-a"},
            "annotations": {"koord-queue/priority": "50", "note": 'it\'s "quoted" ünïcode'},
            "created_at": start,
        },
        {
            **common,
            "ref": JobRef("Job", "batch/v1", "team-a", f"{prefix}-large", f"{prefix}-u2"),
            "pod_sets": [
                {
                    "name": "main",
                    "count": 1,
                    "requests": {"cpu": 20000, "memory": 2**34},
                    "node_selector": {"pool": "a"},
                    "tolerations": [{"key": "gpu", "operator": "Exists"}],
                }
            ],
            "priority": 200,
            "priority_class": "high",
            "expected_runtime_s": None,
            "labels": {"quota.scheduling.koordinator.sh/preemptible": "false"},
            "annotations": {},
            "created_at": start + timedelta(seconds=1, microseconds=123456),
        },
    ]


def _django_insert(actor: Actor, values: list[dict[str, Any]], now: Any) -> list[Workload]:
    created = Workload.objects.bulk_create(Workload(**v) for v in values)
    _record_new(actor, created, now)
    return created


def _values(world: Any, prefix: str, now: Any) -> list[dict[str, Any]]:
    actor = Actor.cluster()
    return [
        _workload_values(
            actor,
            now=now,
            **{k: v for k, v in item.items() if k != "created_at"},
            queue_order_at=item["created_at"],
        )
        for item in _items(world, prefix)
    ]


def _row(workload: Workload) -> dict[str, Any]:
    return {
        f.attname: getattr(workload, f.attname)
        for f in Workload._meta.concrete_fields
        if f.attname not in OWN
    }


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's statement")
def test_one_statement_writes_what_djangos_inserts_write(world):
    actor, now = Actor.cluster(), timezone.now()
    with transaction.atomic():
        changes, trees = registration.insert_workloads(actor, _values(world, "one", now), now)
        expected = _django_insert(actor, _values(world, "bulk", now), now)
    assert len(changes) == 2
    ours = {w.name: w for w in Workload.objects.filter(name__startswith="one-")}
    assert sorted(changes) == sorted((w.tenant_id, w.queue_id, w.pk) for w in ours.values())
    roots, deciding = trees  # named by the same statement: new rows wait, their trees wake
    assert ({r: sorted(ids) for r, ids in roots.items()}, deciding) == (
        {"cluster": sorted(w.pk for w in ours.values())},
        {"cluster"},
    )
    for django_made in expected:
        django_made.refresh_from_db()
        mine = ours[django_made.name.replace("bulk-", "one-")]
        assert _row(mine) == _row(django_made)
        assert (mine.created_at, mine.updated_at) == (now, now)
        assert mine.preemptible == ("large" not in mine.name)  # its label says "false"
        steps = [
            list(
                WorkloadEvent.objects.filter(workload=w).values_list(
                    "at", "from_phase", "to_phase", "reason", "message"
                )
            )
            for w in (mine, django_made)
        ]
        assert steps[0] == steps[1] == [(now, "", "Pending", "Submitted", "")]
        records = [
            AuditEvent.objects.get(object_type="workload", object_id=str(w.pk))
            for w in (mine, django_made)
        ]
        for record, w in zip(records, (mine, django_made), strict=True):
            assert record.object_repr == f"team-a/{w.name}"
            assert record.after["name"] == w.name
        shown = [
            {**{k: getattr(r, k) for k in RECORD}, "after": {**r.after, "name": None}}
            for r in records
        ]
        assert shown[0] == shown[1]


def test_a_collision_with_a_live_workload_inserts_nothing(world):
    now = timezone.now()
    values = _values(world, "dup", now)
    with transaction.atomic():
        _django_insert(Actor.cluster(), values[:1], now)  # the first job is registered already
    before = (Workload.objects.count(), WorkloadEvent.objects.count(), AuditEvent.objects.count())
    items = _items(world, "dup")
    with pytest.raises(IntegrityError), transaction.atomic():
        actions.register_cluster_workloads(items)
    after = (Workload.objects.count(), WorkloadEvent.objects.count(), AuditEvent.objects.count())
    assert after == before
    assert actions.register_cluster_workloads(items[1:]) == 1  # the other one alone goes in
    assert Workload.objects.filter(name="dup-large", phase="Pending").count() == 1
