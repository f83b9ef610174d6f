"""Read-side queries for the dashboard: what pages show, in a fixed number of queries.

Nothing here writes. Amounts stay in canonical integer units; templates format them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery

from portal import eta_text
from queueing.choices import (
    ACTIVE_PHASES,
    HOLDING_PHASES,
    TERMINAL_PHASES,
    WAITING_PHASES,
    Phase,
)
from queueing.events import iso
from queueing.models import CycleRun, Queue, Quota, Tenant, UsageSample, Workload

# The resources every table shows first, in this order; others follow by name.
COMMON_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
PAGE_SIZE = 100


def resource_order(names: Iterable[str]) -> list[str]:
    unique = set(names)
    first = [name for name in COMMON_RESOURCES if name in unique]
    return first + sorted(unique - set(first))


def add_into(total: dict[str, int], values: Mapping[str, Any] | None, times: int = 1) -> None:
    for name, amount in (values or {}).items():
        total[name] = total.get(name, 0) + int(amount) * times


# --- quotas --------------------------------------------------------------------------


@dataclass
class QuotaRow:
    """One quota with what the pages and GET /api/v1/cluster/ show about it.

    ``used``, ``pending`` and ``workloads`` roll up from the leaves to every ancestor;
    ``runtime`` is the runtime quota the last cycle computed (``Quota.runtime``, the one
    store of it; None before any cycle). UsageSample is its history, for charts only.
    """

    quota: Quota
    depth: int = 0
    used: dict[str, int] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    workloads: dict[str, int] = field(default_factory=dict)  # by phase
    runtime: dict[str, int] | None = None
    children: list[QuotaRow] = field(default_factory=list)

    @property
    def resources(self) -> list[str]:
        names = set(self.quota.min) | set(self.quota.max) | set(self.used)
        names |= set(self.runtime or {})
        return resource_order(names)

    def bars(self) -> list[dict[str, Any]]:
        """Per resource: min, runtime, max and used, scaled to the largest of them."""
        out = []
        for name in self.resources:
            values = {
                "min": self.quota.min.get(name),
                "max": self.quota.max.get(name),
                "runtime": (self.runtime or {}).get(name) if self.runtime is not None else None,
                "used": self.used.get(name, 0),
            }
            out.append(bar(name, values))
        return out


def bar(resource: str, values: Mapping[str, int | None]) -> dict[str, Any]:
    """Geometry for one resource bar: every value as a percentage of the scale."""
    known = [int(v) for v in values.values() if v is not None]
    scale = max(known) if known else 0
    pct = {
        key: (None if value is None else (100.0 * int(value) / scale if scale else 0.0))
        for key, value in values.items()
    }
    used, limit = values.get("used") or 0, values.get("runtime")
    if limit is None:
        limit = values.get("max")
    over = limit is not None and used > limit
    return {"resource": resource, "values": dict(values), "pct": pct, "over": over}


def _json(value: Any) -> dict:
    # A JSON column read through a subquery comes back as text on some databases.
    if isinstance(value, str):
        import json

        return dict(json.loads(value))
    return dict(value or {})


@dataclass
class LiveTotals:
    """What live workloads ask for, per quota they sit in (not rolled up)."""

    used: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    pending: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    counts: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))

    def cluster_used(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for amounts in self.used.values():
            add_into(total, amounts)
        return total


def live_totals() -> LiveTotals:
    """One GROUP BY over waiting and holding workloads: identical shapes collapse, so it
    reads few rows even when tens of thousands of workloads wait."""
    totals = LiveTotals()
    rows = (
        Workload.objects.filter(phase__in=(*WAITING_PHASES, *HOLDING_PHASES))
        .values("quota_id", "phase", "total_request")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        quota_id, phase, n = row["quota_id"], row["phase"], row["n"]
        target = totals.used if phase in HOLDING_PHASES else totals.pending
        add_into(target[quota_id], row["total_request"], n)
        add_into(totals.counts[quota_id], {phase: n})
    return totals


def quota_tree(quotas: Sequence[Quota], totals: LiveTotals | None = None) -> list[QuotaRow]:
    """Rows of ``quotas`` in depth-first order, depth counted within them.

    Amounts roll up along the whole tree (a parent holds what its subtree holds, shown
    or not), so a page and the API that show different parts of it agree on each row.
    """
    totals = totals if totals is not None else live_totals()
    rows = {q.pk: QuotaRow(quota=q, runtime=dict(q.runtime) if q.runtime else None) for q in quotas}
    parent_of = dict(Quota.objects.values_list("id", "parent_id"))
    for quota_id in set(totals.used) | set(totals.pending) | set(totals.counts):
        at: int | None = quota_id
        seen: set[int] = set()
        while at is not None and at not in seen:
            seen.add(at)
            if at in rows:
                add_into(rows[at].used, totals.used.get(quota_id))
                add_into(rows[at].pending, totals.pending.get(quota_id))
                add_into(rows[at].workloads, totals.counts.get(quota_id))
            at = parent_of.get(at)
    for row in rows.values():
        if row.quota.parent_id in rows:
            rows[row.quota.parent_id].children.append(row)
    ordered: list[QuotaRow] = []

    def walk(row: QuotaRow, depth: int) -> None:
        row.depth = depth
        ordered.append(row)
        for child in sorted(row.children, key=lambda r: r.quota.name):
            walk(child, depth + 1)

    for top in sorted(
        (row for row in rows.values() if row.quota.parent_id not in rows),
        key=lambda r: r.quota.name,
    ):
        walk(top, 0)
    return ordered


def tenant_top_quotas(tenant: Tenant, quotas: Sequence[Quota]) -> list[Quota]:
    """The tenant's entitlements: its quotas whose parent is not the tenant's."""
    mine = {q.pk for q in quotas}
    return [q for q in quotas if q.tenant_id == tenant.pk and q.parent_id not in mine]


def fair_share(tenant_rows: Sequence[QuotaRow], root: Quota | None) -> list[dict[str, Any]]:
    """Per resource: entitlement (min), fair share now (runtime), use, and cluster size."""
    entitlement: dict[str, int] = {}
    runtime: dict[str, int] = {}
    used: dict[str, int] = {}
    have_runtime = False
    for row in tenant_rows:
        add_into(entitlement, row.quota.min)
        add_into(used, row.used)
        if row.runtime is not None:
            have_runtime = True
            add_into(runtime, row.runtime)
    cluster = dict(root.max or root.min) if root is not None else {}
    out: list[dict[str, Any]] = []
    for name in resource_order(set(entitlement) | set(used) | set(runtime)):
        values: dict[str, int | None] = {
            "entitlement": entitlement.get(name, 0),
            "fair": runtime.get(name, 0) if have_runtime else None,
            "used": used.get(name, 0),
        }
        line = bar(name, values)
        size = cluster.get(name)
        entitled, fair, used_now = values["entitlement"] or 0, values["fair"], values["used"] or 0
        line["cluster"] = size
        line["entitled_pct"] = 100.0 * entitled / size if size else None
        line["used_of_fair"] = 100.0 * used_now / fair if fair else (None if fair is None else 0.0)
        out.append(line)
    return out


def usage_series(
    quotas: Sequence[Quota], points: int = 240
) -> dict[str, list[tuple[datetime, float]]]:
    """Decayed usage over time summed over ``quotas``, per resource.

    Covers every sample kept (the cycle keeps 14 days, one a minute), thinned evenly to
    at most ``points`` instants so the chart's cost does not grow with the history.
    """
    ids = [q.pk for q in quotas]
    times = list(
        UsageSample.objects.filter(quota_id__in=ids)
        .order_by("at")
        .values_list("at", flat=True)
        .distinct()
    )
    if not times:
        return {}
    if len(times) > points:
        step = (len(times) - 1) / (points - 1)
        times = [times[round(i * step)] for i in range(points)]
    totals: dict[datetime, dict[str, float]] = defaultdict(dict)
    for at, decayed in UsageSample.objects.filter(quota_id__in=ids, at__in=times).values_list(
        "at", "decayed"
    ):
        bucket = totals[at]
        for name, amount in _json(decayed).items():
            bucket[name] = bucket.get(name, 0.0) + float(amount)
    series: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    for at in sorted(totals):
        for name in resource_order(totals[at]):
            series[name].append((at, totals[at][name]))
    return {name: series[name] for name in resource_order(series)}


# --- queues and workloads ------------------------------------------------------------


def queue_counts(queues: QuerySet[Queue]) -> QuerySet[Queue]:
    return queues.annotate(
        pending=Count("workloads", filter=Q(workloads__phase__in=WAITING_PHASES)),
        admitted=Count("workloads", filter=Q(workloads__phase=Phase.ADMITTED)),
        running=Count("workloads", filter=Q(workloads__phase=Phase.RUNNING)),
    )


def pending_order() -> list[Any]:
    """Admission order as the cycle ranks it; unranked (new, backing off) last."""
    return [F("position").asc(nulls_last=True), "queue_order_at", "id"]


# The wire form of a workload: what a queue page shows of it, and what the live stream
# sends (docs/events.md, portal.event_schema.WORKLOAD_ROW).
ROW_FIELDS = (
    "id",
    "name",
    "namespace",
    "queue_id",
    "quota_id",
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
# Besides the row's columns, the few stored keys that say why it has no ETA, and aging's
# bound (portal.eta_text): read as JSON keys, not the whole explanation.
ROW_COLUMNS = (
    *ROW_FIELDS,
    "quota__name",
    "queue__name",
    "eta__reason",
    "eta__by_age",
    *(f"explanation__{k}" for k in eta_text.EXPLANATION_KEYS),
)
HOLDING_SHOWN = 100  # a queue page lists this many admitted and running, newest first
FINISHED_SHOWN = 10


def live_row(values: Mapping[str, Any]) -> dict[str, Any]:
    """The wire form of one workload, from ``values(*ROW_COLUMNS)``: with, when it waits
    without an ETA, why (``eta_note`` in a few words, ``eta_why`` in full), and the
    latest start aging promises it (``starts_by``), if any; ``eta_by_age``: its ETA is
    earlier than that of work ahead of it, which it passes by age (``Workload.BY_AGE_NOTE``)."""
    note, why = eta_text.of_row(values)
    return {
        "id": values["id"],
        "name": values["name"],
        "namespace": values["namespace"],
        "queue_id": values["queue_id"],
        "queue": values["queue__name"],
        "quota_id": values["quota_id"],
        "quota": values["quota__name"],
        "phase": values["phase"],
        "priority": values["priority"],
        "position": values["position"],
        "global_position": values["global_position"],
        "eta_p50": iso(values["eta_p50"]),
        "eta_p90": iso(values["eta_p90"]),
        "reason": values["reason"],
        "eta_note": note,
        "eta_why": why,
        "eta_by_age": values["eta_p50"] is not None and values.get("eta__by_age") is True,
        "starts_by": iso(eta_text.starts_by(values["phase"], values["explanation__starts_by"])),
        "queue_order_at": iso(values["queue_order_at"]),
        "admitted_at": iso(values["admitted_at"]),
        "started_at": iso(values["started_at"]),
        "finished_at": iso(values["finished_at"]),
    }


def wire_rows(qs: QuerySet[Workload]) -> list[dict[str, Any]]:
    """Rows in the wire form, in one query (names joined in)."""
    return [live_row(values) for values in qs.values(*ROW_COLUMNS)]


def _of(queue_id: int, tenant_id: int | None) -> QuerySet[Workload]:
    qs = Workload.objects.filter(queue_id=queue_id)
    return qs if tenant_id is None else qs.filter(tenant_id=tenant_id)


def queue_totals(queue_id: int, tenant_id: int | None = None) -> tuple[int, int]:
    """How many workloads of the queue wait, and how many hold quota: one query."""
    totals = (
        _of(queue_id, tenant_id)
        .filter(phase__in=ACTIVE_PHASES)
        .aggregate(
            pending=Count("id", filter=Q(phase__in=WAITING_PHASES)),
            holding=Count("id", filter=Q(phase__in=HOLDING_PHASES)),
        )
    )
    return int(totals["pending"] or 0), int(totals["holding"] or 0)


def pending_rows(
    queue_id: int, offset: int, limit: int, tenant_id: int | None = None
) -> list[dict[str, Any]]:
    """Waiting rows ``offset`` .. ``offset + limit - 1`` in admission order: one query.

    A late row lookup: the subquery sorts and slices only ids (the queue's waiting rows,
    found by the queue's index; position is deliberately not indexed, so the cycle's
    annotations stay heap-only updates: migration 0011, a top-N sort of a few ms at ten
    thousand waiting rows), and only the rows of the window are read whole and joined to
    their names, however long the queue is.
    """
    waiting = _of(queue_id, tenant_id).filter(phase__in=WAITING_PHASES)
    window = waiting.order_by(*pending_order()).values("id")[offset : offset + limit]
    return wire_rows(Workload.objects.filter(id__in=window).order_by(*pending_order()))


def holding_rows(queue_id: int, tenant_id: int | None = None) -> list[dict[str, Any]]:
    """The most recently admitted rows that hold quota: one query."""
    holding = _of(queue_id, tenant_id).filter(phase__in=HOLDING_PHASES)
    return wire_rows(
        holding.order_by(F("admitted_at").desc(nulls_last=True), "-id")[:HOLDING_SHOWN]
    )


def finished_rows(queue_id: int, tenant_id: int | None = None) -> list[dict[str, Any]]:
    """The most recently finished rows: one query."""
    finished = _of(queue_id, tenant_id).filter(phase__in=TERMINAL_PHASES)
    return wire_rows(
        finished.order_by(F("finished_at").desc(nulls_last=True), "-id")[:FINISHED_SHOWN]
    )


@dataclass
class QueueWindow:
    """One page of a queue's pending workloads plus its holding ones."""

    queue: Queue
    page: int
    page_size: int
    pending_total: int
    pending: list[dict[str, Any]]
    holding_total: int
    holding: list[dict[str, Any]]
    finished: list[dict[str, Any]]

    @property
    def pages(self) -> int:
        return max(1, -(-self.pending_total // self.page_size))

    @property
    def first_position(self) -> int:
        return (self.page - 1) * self.page_size + 1

    @property
    def last_position(self) -> int:
        return self.page * self.page_size

    @property
    def is_last_page(self) -> bool:
        return self.page >= self.pages

    def state(self) -> dict[str, Any]:
        """What the page's script starts from (and refetches to resynchronise)."""
        return {
            "queue": self.queue.pk,
            "page": self.page,
            "pages": self.pages,
            "page_size": self.page_size,
            "first": self.first_position,
            "last": self.last_position,
            "pending_total": self.pending_total,
            "holding_total": self.holding_total,
            "holding_shown": HOLDING_SHOWN,
            "pending_rows": self.pending,
            "holding_rows": self.holding,
            "finished_rows": self.finished,
        }


def queue_window(queue: Queue, page: int = 1, page_size: int = PAGE_SIZE) -> QueueWindow:
    """Four queries, whatever the queue's length. The live stream reads a subscribed
    window with the same functions (portal.stream_queries), so a page that applies its
    frames shows what a fresh load would."""
    pending_total, holding_total = queue_totals(queue.pk)
    pages = max(1, -(-pending_total // page_size))
    page = min(max(1, page), pages)
    return QueueWindow(
        queue=queue,
        page=page,
        page_size=page_size,
        pending_total=pending_total,
        pending=pending_rows(queue.pk, (page - 1) * page_size, page_size),
        holding_total=holding_total,
        holding=holding_rows(queue.pk),
        finished=finished_rows(queue.pk),
    )


def last_cycle_at() -> datetime | None:
    return CycleRun.objects.order_by("-started_at").values_list("started_at", flat=True).first()


def recent_cycles(limit: int = 60) -> list[CycleRun]:
    return list(CycleRun.objects.order_by("-started_at", "-id")[:limit])


@dataclass
class NodeHoldRow:
    """Free room a cycle kept on a node for one waiting workload (``CycleRun.holds``)."""

    kind: str  # "drain" | "reservation"
    resources: dict[str, int]
    workload: Workload | None  # None: gone since
    workload_id: int
    root: str
    as_of: datetime


def latest_holds() -> list[dict[str, Any]]:
    """The holds (``CycleRun.holds``) of the latest cycle of each quota tree, with the
    tree's root and when that cycle ran; trees whose latest cycle kept nothing left out.
    One query, whatever the number of trees."""
    latest = CycleRun.objects.filter(root=OuterRef("name")).order_by("-started_at", "-id")
    ids = Quota.objects.filter(parent__isnull=True).annotate(run=Subquery(latest.values("id")[:1]))
    runs = CycleRun.objects.filter(id__in=ids.values("run"))
    return [dict(run) for run in runs.values("root", "started_at", "holds") if run["holds"]]


def kept_on_nodes(latest: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per node, the room the latest cycles (:func:`latest_holds`) kept free for
    waiting workloads."""
    kept: dict[str, dict[str, int]] = defaultdict(dict)
    for run in latest:
        for h in run["holds"]:
            add_into(kept[h["node"]], h.get("resources"))
    return kept


def node_holds(latest: list[dict[str, Any]]) -> dict[str, list[NodeHoldRow]]:
    """Per node, the room the latest cycle of each quota tree (:func:`latest_holds`)
    kept free for waiting workloads (drains of aged heads, reservations of
    preemptors): free, but not idle."""
    ids = {int(h["workload_id"]) for run in latest for h in run["holds"]}
    workloads = Workload.objects.select_related("tenant", "queue").in_bulk(ids) if ids else {}
    out: dict[str, list[NodeHoldRow]] = defaultdict(list)
    for run in latest:
        for h in run["holds"]:
            wid = int(h["workload_id"])
            out[h["node"]].append(
                NodeHoldRow(
                    kind=h["kind"],
                    resources={k: int(v) for k, v in (h.get("resources") or {}).items()},
                    workload=workloads.get(wid),
                    workload_id=wid,
                    root=run["root"],
                    as_of=run["started_at"],
                )
            )
    return out


def node_usage() -> dict[str, dict[str, int]]:
    """What holding workloads hold on each node (from their assignments)."""
    held: dict[str, dict[str, int]] = defaultdict(dict)
    for assignment in Workload.objects.filter(phase__in=HOLDING_PHASES).values_list(
        "assignment", flat=True
    ):
        for node, amounts in (assignment or {}).items():
            add_into(held[node], amounts)
    return held
