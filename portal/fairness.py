"""Fairness over time, read from what the cycle and the actions stored.

* UsageSample (one a minute per quota, kept 14 days): usage, runtime quota and the
  decayed usage of the ledger;
* AuditEvent ``quota.update``: the entitlement (min) as it was at any time, and the
  edits to mark on a chart;
* WorkloadEvent to Preempted, with Workload.preempted_by: preemptions taken and given.

Decayed usage is stored as decayed resource-seconds. Multiplied by ln 2 / half-life it
becomes the amount whose steady use would have left that much (a constant use u decays
to u · half-life / ln 2), so it plots in the same unit as the others: "decayed usage"
is the long-run average use the fair-share order remembers.

Tenant comparison (cluster admins): per tenant, the share of its entitlement it
received over a window -- the time average of its dominant share, max over resources
of used / min -- and Jain's fairness index of those shares over the tenants that ran
anything in the window: (Σx)² / (n·Σx²), 1 when every active tenant received the same
share of its entitlement, 1/n when one received everything.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from portal import audit_text, queries
from queueing.choices import Phase
from queueing.models import AuditEvent, Quota, Tenant, UsageSample, WorkloadEvent

POINTS = 240  # a chart reads at most this many instants, whatever the window
MARKERS = 200  # and marks at most this many events of each kind
WINDOWS = {"1h": timedelta(hours=1), "6h": timedelta(hours=6), "1d": timedelta(days=1),
           "14d": timedelta(days=14)}  # fmt: skip
REQUEUE_REASON = "AdmissionTimeout"  # a requeue after an admission timeout is no preemption


def _json(value: Any) -> dict[str, Any]:
    return queries._json(value)


def decay_rate() -> float:
    return math.log(2) / float(settings.KQ_USAGE_HALF_LIFE_S)


@dataclass
class Entitlements:
    """Each quota's min as it was at any instant, rebuilt from its audited edits."""

    current: dict[int, dict[str, int]]
    edits: dict[int, list[tuple[datetime, dict[str, int], dict[str, int]]]]

    @classmethod
    def of(cls, quotas: Sequence[Quota], since: datetime) -> Entitlements:
        ids = [q.pk for q in quotas]
        edits: dict[int, list[tuple[datetime, dict[str, int], dict[str, int]]]] = defaultdict(list)
        rows = AuditEvent.objects.filter(
            action="quota.update", object_id__in=[str(i) for i in ids], at__gte=since
        ).order_by("at", "id")
        for at, object_id, before, after in rows.values_list("at", "object_id", "before", "after"):
            old, new = _json(before).get("min"), _json(after).get("min")
            if old != new:
                edits[int(object_id)].append((at, dict(old or {}), dict(new or {})))
        return cls({q.pk: dict(q.min or {}) for q in quotas}, edits)

    def at(self, quota_id: int, when: datetime) -> dict[str, int]:
        for at, before, _after in self.edits.get(quota_id, []):
            if at > when:
                return before  # the first edit after `when` says what it was before
        return self.current.get(quota_id, {})


@dataclass
class Series:
    """One chart: per instant, the four amounts of one resource, and the marks."""

    resource: str
    times: list[datetime] = field(default_factory=list)
    entitlement: list[int] = field(default_factory=list)
    runtime: list[int | None] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    decayed: list[float] = field(default_factory=list)
    marks: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "t": [int(t.timestamp() * 1000) for t in self.times],
            "entitlement": self.entitlement,
            "runtime": self.runtime,
            "used": self.used,
            "decayed": [round(v, 3) for v in self.decayed],
            "marks": self.marks,
        }

    def table(self, rows: int = 12) -> list[dict[str, Any]]:
        """A few evenly spread instants, for the table beside the chart."""
        if not self.times:
            return []
        step = max(1, math.ceil(len(self.times) / rows))
        picks = list(range(len(self.times) - 1, -1, -step))[::-1]
        return [
            {
                "at": self.times[i],
                "entitlement": self.entitlement[i],
                "runtime": self.runtime[i],
                "used": self.used[i],
                "decayed": self.decayed[i],
            }
            for i in picks
        ]


def _instants(quota_ids: Sequence[int], since: datetime) -> list[datetime]:
    times = list(
        UsageSample.objects.filter(quota_id__in=quota_ids, at__gte=since)
        .order_by("at")
        .values_list("at", flat=True)
        .distinct()
    )
    if len(times) > POINTS:
        step = (len(times) - 1) / (POINTS - 1)
        times = [times[round(i * step)] for i in range(POINTS)]
    return times


def history(quotas: Sequence[Quota], resource: str, since: datetime) -> Series:
    """The summed history of ``quotas`` (a tenant's top quotas, or one quota) since then."""
    ids = [q.pk for q in quotas]
    series = Series(resource)
    times = _instants(ids, since)
    if not times:
        return series
    entitled = Entitlements.of(quotas, since)
    rate = decay_rate()
    by_time: dict[datetime, list[tuple[int, dict, dict, dict]]] = defaultdict(list)
    samples = UsageSample.objects.filter(quota_id__in=ids, at__in=times).values_list(
        "quota_id", "at", "used", "runtime", "decayed"
    )
    for quota_id, at, used, runtime, decayed in samples:
        by_time[at].append((quota_id, _json(used), _json(runtime), _json(decayed)))
    for at in times:
        rows = by_time.get(at, [])
        series.times.append(at)
        series.entitlement.append(sum(int(entitled.at(i, at).get(resource, 0)) for i in ids))
        series.used.append(sum(int(u.get(resource, 0)) for _, u, _, _ in rows))
        runtimes = [r for _, _, r, _ in rows if r]
        series.runtime.append(sum(int(r.get(resource, 0)) for r in runtimes) if runtimes else None)
        series.decayed.append(sum(float(d.get(resource, 0.0)) for _, _, _, d in rows) * rate)
    series.marks = marks(quotas, since)
    return series


def _subtree(quotas: Sequence[Quota]) -> list[int]:
    children: dict[int | None, list[int]] = defaultdict(list)
    for pk, parent in Quota.objects.values_list("pk", "parent_id"):
        children[parent].append(pk)
    found, stack = set(), [q.pk for q in quotas]
    while stack:
        pk = stack.pop()
        if pk not in found:
            found.add(pk)
            stack.extend(children.get(pk, []))
    return sorted(found)


def preemptions(quota_ids: Sequence[int], since: datetime) -> tuple[Q, Q]:
    """Filters of WorkloadEvent: preemptions taken by, and given by, these quotas."""
    base = Q(to_phase=Phase.PREEMPTED, at__gte=since) & ~Q(reason=REQUEUE_REASON)
    return (
        base & Q(workload__quota_id__in=quota_ids),
        base & Q(workload__preempted_by__quota_id__in=quota_ids),
    )


def marks(quotas: Sequence[Quota], since: datetime) -> list[dict[str, Any]]:
    """Preemptions taken and given within the quotas' subtree, and edits of the quotas."""
    ids = _subtree(quotas)
    taken, given = preemptions(ids, since)
    found: list[dict[str, Any]] = []
    for kind, condition in (("taken", taken), ("given", given)):
        events = (
            WorkloadEvent.objects.filter(condition)
            .order_by("-at")
            .values_list("at", "workload__namespace", "workload__name", "message")[:MARKERS]
        )
        for at, namespace, name, message in events:
            verb = "preempted" if kind == "taken" else "preempted another to start"
            text = f"{namespace}/{name} {verb}" + (
                f": {message}" if message and kind == "taken" else ""
            )
            found.append({"kind": kind, "t": int(at.timestamp() * 1000), "text": text[:200]})
    edits = list(
        AuditEvent.objects.filter(
            action="quota.update", object_id__in=[str(q.pk) for q in quotas], at__gte=since
        ).order_by("-at")[:MARKERS]
    )
    for line in audit_text.lines(edits):
        found.append({"kind": "edit", "t": int(line.event.at.timestamp() * 1000),
                      "text": line.sentence})  # fmt: skip
    return sorted(found, key=lambda m: m["t"])


# --- comparing tenants -------------------------------------------------------------------


def dominant_share(used: Mapping[str, Any], entitlement: Mapping[str, Any]) -> float | None:
    """max over resources of used / min; None with no entitlement at all."""
    shares = [
        float(used.get(name, 0)) / float(amount)
        for name, amount in entitlement.items()
        if amount and float(amount) > 0
    ]
    return max(shares) if shares else None


def jain(values: Iterable[float]) -> float | None:
    xs = list(values)
    if not xs:
        return None
    total = sum(xs)
    squares = sum(x * x for x in xs)
    if squares == 0:
        return None  # nobody received anything: the index says nothing
    return total * total / (len(xs) * squares)


@dataclass
class TenantFairness:
    tenant: Tenant
    entitlement: dict[str, int]
    received: dict[str, float | None]  # window -> time-averaged dominant share
    active: dict[str, bool]  # window -> ran anything in it
    taken: dict[str, int]
    given: dict[str, int]


def compare(windows: Mapping[str, timedelta], now: datetime | None = None) -> dict[str, Any]:
    """Every tenant side by side over each window, and Jain's index per window."""
    now = now or timezone.now()
    oldest = now - max(windows.values())
    quotas = list(Quota.objects.all())
    by_tenant: dict[int, list[Quota]] = defaultdict(list)
    for tenant in Tenant.objects.order_by("name"):
        by_tenant[tenant.pk] = queries.tenant_top_quotas(
            tenant, [q for q in quotas if q.tenant_id == tenant.pk]
        )
    tenants = {t.pk: t for t in Tenant.objects.filter(pk__in=list(by_tenant))}
    top_ids = {q.pk: tenant_id for tenant_id, qs in by_tenant.items() for q in qs}
    entitled = Entitlements.of([q for qs in by_tenant.values() for q in qs], oldest)
    # Per tenant and instant: the summed used, and the summed entitlement then.
    used_at: dict[int, dict[datetime, dict[str, int]]] = defaultdict(dict)
    samples = UsageSample.objects.filter(quota_id__in=list(top_ids), at__gte=oldest).values_list(
        "quota_id", "at", "used"
    )
    for quota_id, at, used in samples:
        bucket = used_at[top_ids[quota_id]].setdefault(at, {})
        queries.add_into(bucket, _json(used))
    rows = []
    for tenant_id, tops in by_tenant.items():
        entitlement: dict[str, int] = {}
        for q in tops:
            queries.add_into(entitlement, q.min)
        received: dict[str, float | None] = {}
        active: dict[str, bool] = {}
        taken: dict[str, int] = {}
        given: dict[str, int] = {}
        subtree = _subtree(tops) if tops else []
        for label, span in windows.items():
            since = now - span
            shares, ran = [], False
            for at, used in used_at[tenant_id].items():
                if at < since:
                    continue
                then: dict[str, int] = {}
                for q in tops:
                    queries.add_into(then, entitled.at(q.pk, at))
                share = dominant_share(used, then)
                if share is not None:
                    shares.append(share)
                ran = ran or any(int(v) > 0 for v in used.values())
            received[label] = sum(shares) / len(shares) if shares else None
            active[label] = ran
            took, gave = preemptions(subtree, since)
            taken[label] = WorkloadEvent.objects.filter(took, at__lte=now).count()
            given[label] = WorkloadEvent.objects.filter(gave, at__lte=now).count()
        rows.append(TenantFairness(tenants[tenant_id], entitlement, received, active, taken, given))
    index = {
        label: jain(
            r.received[label] or 0.0
            for r in rows
            if r.active[label] and r.received[label] is not None
        )
        for label in windows
    }
    return {"rows": rows, "jain": index, "windows": list(windows), "now": now}
