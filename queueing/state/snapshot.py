"""ORM -> Snapshot: ``build_snapshot`` reads a tree with a fixed number of queries,
whatever the number of workloads."""

from __future__ import annotations

import logging
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection
from django.db.models import F, Q, Window
from django.db.models.expressions import RawSQL
from django.db.models.functions import RowNumber
from django.utils import timezone

from queueing import forecasting
from queueing.choices import HOLDING_PHASES, QUEUE_SETTINGS, WAITING_PHASES, Phase
from queueing.cluster.base import NodeInfo
from queueing.engine import ledger as engine_ledger
from queueing.engine.aging import aged_cutoff
from queueing.engine.resources import Resources
from queueing.engine.types import (
    EngineConfig,
    NodeSpec,
    PodSet,
    QueueSpec,
    QuotaNode,
    Snapshot,
    Taint,
    WorkloadSpec,
)
from queueing.models import (
    Queue,
    Quota,
    Workload,
)
from queueing.podsets import engine_pod_sets
from queueing.queueorder import row_order_key
from queueing.state import placement
from queueing.world import Since

if TYPE_CHECKING:
    from queueing.world import TreeWorld

log = logging.getLogger(__name__)

HISTORY_LIMIT = 5000  # finished workloads that feed the runtime quantiles


def epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def from_epoch(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def engine_config(*, forecaster: bool = False) -> EngineConfig:
    """The engine's configuration from the settings; ``forecaster``: for the forecaster
    (queueing.forecaster), whose forecast holds no admission and gets a budget of its own
    (``KQ_FORECASTER_ETA_BUDGET_S``, else ``KQ_ETA_BUDGET_S``)."""
    return EngineConfig(
        fair_share_mode=settings.KQ_FAIR_SHARE_MODE,
        usage_half_life_s=settings.KQ_USAGE_HALF_LIFE_S,
        pool_label=settings.KQ_POOL_LABEL,
        backfill=settings.KQ_BACKFILL,
        eta_budget_s=(
            settings.KQ_FORECASTER_ETA_BUDGET_S if forecaster else settings.KQ_ETA_BUDGET_S
        ),
    )


# --- snapshot ------------------------------------------------------------------------

WORKLOAD_FIELDS = (
    "id",
    "name",
    "namespace",
    "kind",
    "api_version",
    "object_uid",
    "tenant_id",
    "quota_id",
    "queue_id",
    "priority",
    "queue_order_at",
    "pod_sets",
    "phase",
    "requeue_at",
    "attempts",
    "expected_runtime_s",
    "admitted_at",
    "started_at",
    "assignment",
    "preempted_by_id",
    "nominated",
    "awaiting",
    "preemptible",
    "position",
    "global_position",
    "eta_p50",
    "eta_p90",
    "reason",
)


# What a tree's world keeps of each row (queueing.world): the above and its total request.
WORLD_FIELDS = (*WORKLOAD_FIELDS, "total_request")


@dataclass
class SnapshotIndex:
    """What apply() needs beside the snapshot: ids, owners and the stored annotations."""

    root: str
    rows: dict[int, dict[str, Any]]
    quota_ids: dict[str, int]
    queue_ids: dict[str, int]
    quota_names: dict[int, str]
    queue_names: dict[int, str]
    ledgers: dict[str, tuple[dict[str, float], datetime | None]]
    now: datetime
    #: Competing workloads left out of a heads-only snapshot (``head``), not in ``rows``.
    unlisted: int = 0
    #: What other trees held per node when the snapshot was read (state.placement).
    elsewhere: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The tree's world the rows came from, if any (apply journals for it: world.record_cycle).
    world: TreeWorld | None = None
    #: The tree's quotas as read (id -> tenant_id, runtime, used, min, max): what
    #: state.quotas compares the new runtime quota and usage against (only this tree's
    #: cycle, under its lease, writes those two).
    quota_rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: The tree's leaf quotas (their usage ledgers are charged) and the ledgers' row ids.
    leaves: frozenset[str] = frozenset()
    ledger_ids: dict[str, int] = field(default_factory=dict)


class PassReads:
    """What the cycles of one pass (a task cycling several woken trees in turn) read once
    for all of them, where each tree's snapshot read it again: the queues (configuration)
    and what every tree holds on the nodes (``placement.held_by_quota``; each tree's
    snapshot counts the others'). Each tree's own quotas, ledgers and rows are still read
    under its own lease (``read_quotas(root)``, its world): what its cycle writes is only
    read by a cycle that holds its lease. What the trees cycled earlier in the pass admitted
    is added to what they hold (``took``), so the next tree's engine does not place on that
    room; what other workers changed since the read is what it was for a snapshot read per
    tree: the placement check under the lock (``apply`` step 2) withdraws an admission whose
    room another tree took, and room freed since is seen by the next cycle."""

    def __init__(self) -> None:
        self._queues: list[dict[str, Any]] | None = None
        self._held: dict[int, placement.Usage] | None = None
        #: The placement lock's token as of ``_held`` (the read's, then each taking by
        #: this pass's applies that followed it with nobody's in between), or None once
        #: another taking came between (``placement.lock_and_read``).
        self.placement_token: int | None = None
        self._quotas: dict[str, list[dict[str, Any]]] = {}
        self._journal: dict[str, tuple[str, Since]] = {}

    def read_quotas(self, roots: Sequence[str]) -> None:
        """The quotas with their ledgers of every tree of ``roots``, in one read (as
        ``read_quotas(root)`` reads one tree's). Only for trees whose leases the pass
        holds already: what a tree's cycle writes of its quotas (runtime quota, usage,
        ledgers) only a holder of its lease writes, so the read stays true until the
        tree's cycle, however late in the pass it comes. A tree whose lease is taken
        after this read reads its own (``quotas`` gives None)."""
        if not roots:
            return
        rows = read_quotas_of(roots)
        for root in roots:
            self._quotas[root] = [dict(q) for q in subtree(rows, root)]

    def quotas(self, root: str) -> list[dict[str, Any]] | None:
        """The tree's quotas as ``read_quotas`` read them for the pass (once: a second
        cycle of the tree in the pass reads its own), or None."""
        return self._quotas.pop(root, None)

    def read_journal(self, worlds: Sequence[TreeWorld]) -> None:
        """What the journal recorded after each world's cursor, in one read for every
        tree of the pass (``Journal.since_many``); each world's refresh takes its own
        (``journal``) instead of reading the journal again. Made after the pass took the
        trees' leases and before any of their rows are read (a world reads the journal
        first, then the rows it names): a change recorded after this read is read by the
        tree's next refresh, as one recorded just after a refresh of its own would be."""
        from queueing import world as worlds_

        chosen = {w.root: w for w in worlds if not w.due_rebuild() and w.cursor is not None}
        if not chosen:
            return
        found = worlds_.journal().since_many(
            {root: (str(w.cursor), w.token) for root, w in chosen.items()}
        )
        for root, answer in found.items():
            self._journal[root] = (str(chosen[root].cursor), answer)

    def journal(self, root: str) -> tuple[str, Since] | None:
        """The pass's read of the tree's journal (``read_journal``), once, or None."""
        return self._journal.pop(root, None)

    def queues(self) -> list[dict[str, Any]]:
        if self._queues is None:
            self._queues = _read_queues()
        return self._queues

    def elsewhere(self, quota_ids: Iterable[int]) -> placement.Usage:
        """What the trees other than the one of ``quota_ids`` hold, per node."""
        if self._held is None:
            self._held, self.placement_token = placement.held_by_quota()
        mine = set(quota_ids)
        out: placement.Usage = defaultdict(dict)
        for quota_id, usage in self._held.items():
            if quota_id not in mine:
                placement._add(out, usage)
        return out

    def took(self, quota_id: int, assignment: Mapping[str, Mapping[str, int]]) -> None:
        """An admission of this pass, committed: its quota holds ``assignment`` now."""
        if self._held is not None:
            placement._add(self._held.setdefault(quota_id, defaultdict(dict)), assignment)

    def locked(self, token: int | None) -> None:
        """An apply of this pass committed, having taken the placement lock with ``token``
        (None: it took none) and its admissions added (``took``): the holdings are known
        as of that token when it is the next one, else no longer by token."""
        if token is None or self.placement_token is None:
            return
        self.placement_token = token if token == self.placement_token + 1 else None


def _read_queues() -> list[dict[str, Any]]:
    return list(Queue.objects.values("id", "name", *QUEUE_SETTINGS))


def subtree(quotas: Sequence[Mapping[str, Any]], root: str | None) -> list[Mapping[str, Any]]:
    """The quotas under ``root`` (inclusive); every quota when root is None."""
    if root is None:
        return list(quotas)
    children: dict[int | None, list[Mapping[str, Any]]] = defaultdict(list)
    for quota in quotas:
        children[quota["parent_id"]].append(quota)
    top = [q for q in quotas if q["name"] == root]
    out: list[Mapping[str, Any]] = []
    stack = list(top)
    while stack:
        quota = stack.pop()
        out.append(quota)
        stack.extend(children.get(quota["id"], ()))
    return out


def tree_quota_ids(root: str, quotas: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
    """The ids of the quotas under ``root`` (inclusive); ``quotas``: rows already read
    (``read_quotas``), else one query."""
    if quotas is None:
        quotas = list(Quota.objects.values("id", "name", "parent_id"))
    return [q["id"] for q in subtree(quotas, root)]


QUOTA_FIELDS = (
    "id",
    "name",
    "parent_id",
    "min",
    "max",
    "shared_weight",
    "fair_weight",
    "allow_lent",
    "tenant_id",
    "runtime",
    "used",
)


def read_quotas(root: str | None = None) -> list[dict[str, Any]]:
    """The quotas of the tree under ``root`` (inclusive; every quota when None), each with
    its usage ledger (``ledger_id``, ``ledger_usage``, ``ledger_updated_at``; None without
    one): one query, what a cycle reads of quotas (the tree's ids for its world, and
    build_snapshot's ``quotas``). The tree's ids come from a recursive subquery in the same
    statement: a cycle decoded every tree's quotas and ledgers before (9 % of its CPU at a
    tenth of kueue_baseline_e2e, five trees), and used one tree's."""
    return read_quotas_of(None if root is None else [root])


def read_quotas_of(roots: Sequence[str] | None) -> list[dict[str, Any]]:
    """``read_quotas`` of the trees under each of ``roots`` (None: every quota), in one
    query (a pass's trees: ``PassReads.read_quotas``)."""
    rows = Quota.objects.all()
    if roots is not None:
        chosen = list(dict.fromkeys(roots))
        rows = rows.filter(id__in=RawSQL(_tree_ids_sql(len(chosen)), chosen))  # noqa: S611 (no input in the SQL)
    return [
        {
            **{name: row[name] for name in QUOTA_FIELDS},
            "ledger_id": row["ledger__id"],
            "ledger_usage": row["ledger__usage"],
            "ledger_updated_at": row["ledger__updated_at"],
        }
        for row in rows.values(*QUOTA_FIELDS, "ledger__id", "ledger__usage", "ledger__updated_at")
    ]


def _tree_ids_sql(names: int = 1) -> str:
    """The ids of the quotas under ``names`` named quotas (inclusive), as a recursive
    subquery (PostgreSQL and SQLite alike); the names are its parameters."""
    q = connection.ops.quote_name
    table = q(Quota._meta.db_table)
    marks = ", ".join(["%s"] * max(1, names))
    # Identifiers from the model's meta, quoted; the names are parameters.
    return (
        f"WITH RECURSIVE kq_tree(id) AS (SELECT {q('id')} FROM {table} WHERE {q('name')} IN ({marks}) "  # noqa: S608
        f"UNION ALL SELECT c.{q('id')} FROM {table} c JOIN kq_tree t ON c.{q('parent_id')} = t.id) "
        "SELECT id FROM kq_tree"
    )


def roots() -> list[str]:
    return list(Quota.objects.filter(parent__isnull=True).values_list("name", flat=True))


def _runtime_history(queue_ids: Iterable[int]) -> dict[int, tuple[float, float]]:
    rows = (
        Workload.objects.filter(
            queue_id__in=list(queue_ids),
            phase=Phase.SUCCEEDED,
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .order_by("-finished_at")
        .values_list("queue_id", "started_at", "finished_at")[:HISTORY_LIMIT]
    )
    durations: dict[int, list[float]] = defaultdict(list)
    for queue_id, started, finished in rows:
        if started is not None and finished is not None:
            durations[queue_id].append(max(0.0, (finished - started).total_seconds()))
    out: dict[int, tuple[float, float]] = {}
    for queue_id, values in durations.items():
        if len(values) >= 2:
            deciles = statistics.quantiles(values, n=10, method="inclusive")
            out[queue_id] = (statistics.median(values), deciles[8])
        else:
            out[queue_id] = (values[0], values[0])
    return out


_history: dict[frozenset[int], tuple[float, dict[int, tuple[float, float]]]] = {}


def _runtime_history_cached(queue_ids: Iterable[int]) -> dict[int, tuple[float, float]]:
    """The runtime history as a cycle of this process read it in the last
    KQ_HISTORY_TTL_S (the same for every tree; it moves with finishes, over the last
    HISTORY_LIMIT of them)."""
    key = frozenset(queue_ids)
    hit = _history.get(key)
    if hit is not None and time.monotonic() - hit[0] < settings.KQ_HISTORY_TTL_S:
        return hit[1]
    value = _runtime_history(key)
    _history.clear()
    _history[key] = (time.monotonic(), value)
    return value


def build_snapshot(
    root: str | None,
    *,
    nodes: Sequence[NodeInfo],
    now: datetime | None = None,
    config: EngineConfig | None = None,
    head: int | None = None,
    world: TreeWorld | None = None,
    forecast: bool = True,
    quotas: Sequence[Mapping[str, Any]] | None = None,
    shared: PassReads | None = None,
) -> tuple[Snapshot, SnapshotIndex]:
    """Read the database into a Snapshot of the tree under ``root`` (None: every tree).

    A fixed number of queries: quotas with their ledgers (or ``quotas``, as
    ``read_quotas`` gave them), queues, live workloads (none with a ``world``), other
    trees' holdings, runtime history (cached per process).

    ``head``: list only the first ``head`` competing workloads of each queue (in the
    engine's queue order) and give the rest as ``unlisted_demand``; waiting workloads
    that do not compete yet (Backoff until later) are left out. The admissions are
    those of a full snapshot while no queue admits past its head (see the engine's
    ``Snapshot``); positions and ETAs cover the listed heads only.

    ``world``: the tree's rows come from its world kept in memory (queueing.world), which
    the caller has refreshed; no workload of the tree is read here.

    ``shared``: the queues and the other trees' holdings as the pass read them (several
    trees cycled in turn by one task: ``PassReads``).
    """
    now = now or timezone.now()
    config = config or engine_config()
    all_quotas = list(quotas) if quotas is not None else read_quotas(root)
    quotas = subtree(all_quotas, root)
    quota_ids = {q["name"]: q["id"] for q in quotas}
    id_to_quota = {q["id"]: q["name"] for q in all_quotas}

    queue_rows = shared.queues() if shared is not None else _read_queues()
    queue_names = {q["id"]: q["name"] for q in queue_rows}

    # Each queue's first ``head`` in the engine's queue order (aged first: aging.order_key).
    aging_bounds = {q["id"]: q["aging_bound_s"] for q in queue_rows}
    if world is not None:
        rows, demand_by_id, unlisted = world.select(head, now, aging_bounds)
        unlisted_demand = {id_to_quota[qid]: held for qid, held in demand_by_id.items()}
    else:
        rows, unlisted_demand, unlisted = _read_rows(
            list(quota_ids.values()), id_to_quota, head, now, aging_bounds
        )
    # Nodes are shared between trees: what other trees hold is not free for this one.
    elsewhere: Mapping[str, Mapping[str, int]] = {}
    if root is not None:
        elsewhere = (
            shared.elsewhere(quota_ids.values())
            if shared is not None
            else placement.held_elsewhere(quota_ids.values())
        )

    ledgers: dict[str, tuple[dict[str, float], datetime | None]] = {}
    ledger_ids: dict[str, int] = {}
    for q in quotas:  # read with the quotas (read_quotas)
        if q["ledger_id"] is not None:
            ledgers[q["name"]] = (dict(q["ledger_usage"] or {}), q["ledger_updated_at"])
            ledger_ids[q["name"]] = q["ledger_id"]
    history = _runtime_history_cached(queue_names)

    used_queue_ids = {row["queue_id"] for row in rows.values()}
    snapshot = Snapshot(
        now=now.timestamp(),
        quotas=tuple(
            QuotaNode(
                name=q["name"],
                parent=id_to_quota.get(q["parent_id"])
                if q["parent_id"] in quota_ids.values()
                else None,
                min=Resources(q["min"] or {}),
                max=dict(q["max"] or {}),
                shared_weight=dict(q["shared_weight"] or {}),
                fair_weight=q["fair_weight"],
                allow_lent=q["allow_lent"],
            )
            for q in quotas
        ),
        queues=tuple(
            QueueSpec(
                name=q["name"],
                policy=q["policy"],
                priority=q["priority"],
                priority_threshold=q["priority_threshold"],
                max_depth=q["max_depth"],
                preempt_within_quota=q["preempt_within_quota"],
                reclaim=q["reclaim"],
                admission_timeout_s=q["admission_timeout_s"],
                backoff_base_s=q["backoff_base_s"],
                backoff_max_s=q["backoff_max_s"],
                backoff_jitter=q["backoff_jitter"],
                aging_bound_s=q["aging_bound_s"],
            )
            for q in queue_rows
            if q["id"] in used_queue_ids
        ),
        workloads=_workload_specs(
            rows.values(), id_to_quota, queue_names, world.specs if world is not None else None
        ),
        nodes=tuple(_node_spec(node, elsewhere.get(node.name)) for node in nodes),
        ledger={
            name: engine_ledger.decay(
                usage,
                (now - updated).total_seconds() if updated else 0.0,
                config.usage_half_life_s,
            )
            for name, (usage, updated) in ledgers.items()
        },
        runtime_history={
            queue_names[qid]: value for qid, value in history.items() if qid in queue_names
        },
        config=config,
        unlisted_demand=unlisted_demand,
    )
    index = SnapshotIndex(
        root=root or "*",
        rows=rows,
        quota_ids=quota_ids,
        queue_ids={name: qid for qid, name in queue_names.items()},
        quota_names=id_to_quota,
        queue_names=queue_names,
        ledgers=ledgers,
        now=now,
        unlisted=unlisted,
        elsewhere={node: dict(held) for node, held in elsewhere.items()},
        world=world,
        quota_rows={
            q["id"]: {k: q[k] for k in ("id", "name", "tenant_id", "runtime", "used", "min", "max")}
            for q in quotas
        },
        leaves=frozenset(quota_ids) - {id_to_quota.get(q["parent_id"]) for q in quotas},
        ledger_ids=ledger_ids,
    )
    # What the forecast learns from history (runtime ratios, residuals, arrivals, the
    # previous ETAs): queueing.forecasting.
    # A cycle without the forecast (state.forecast_due) skips the previous ETAs: one
    # query and a JSON decode per waiting row of the tree, which only the forecast reads.
    return forecasting.with_history(snapshot, index, previous=forecast), index


def _read_rows(
    quota_ids: list[int],
    id_to_quota: Mapping[int, str],
    head: int | None,
    now: datetime,
    aging_bounds: Mapping[int, float | None] | None = None,
) -> tuple[dict[int, dict[str, Any]], dict[str, dict[str, int]], int]:
    """The tree's rows from the database: (rows, unlisted demand per quota, unlisted).

    ``head``: each queue's first ``head`` competing rows in the engine's queue order
    (``aging.order_key``; ``aging_bounds``: ``aging_bound_s`` by queue id, a queue
    missing from it has aging off), drawn from its first ``head`` by priority and its
    first ``head`` aged ones in the order they queued (see ``TreeWorld.select``)."""
    in_tree = Workload.objects.filter(quota_id__in=quota_ids)
    unlisted_demand: dict[str, dict[str, int]] = {}
    unlisted = 0
    if head is None:
        rows = {
            row["id"]: row
            for row in in_tree.filter(phase__in=[*WAITING_PHASES, *HOLDING_PHASES]).values(
                *WORKLOAD_FIELDS
            )
        }
    else:
        competing = (
            Q(phase=Phase.PENDING)
            | Q(phase=Phase.BACKOFF, requeue_at__isnull=True)
            | Q(phase=Phase.BACKOFF, requeue_at__lte=now)
        )
        rows = {
            row["id"]: row
            for row in in_tree.filter(phase__in=HOLDING_PHASES).values(*WORKLOAD_FIELDS)
        }
        ranked = in_tree.filter(competing).annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("queue_id")],
                order_by=[F("priority").desc(), F("queue_order_at").asc(), F("id").asc()],
            )
        )
        cands: dict[int, dict[int, dict[str, Any]]] = defaultdict(dict)
        for row in ranked.filter(rank__lte=head).values(*WORKLOAD_FIELDS):
            cands[row["queue_id"]][row["id"]] = row
        bounds = aging_bounds or {}
        at = now.timestamp()
        # The aged, per distinct bound (a second late: the engine's key decides below).
        by_bound: dict[float, list[int]] = defaultdict(list)
        for queue_id, bound in bounds.items():
            if bound is not None:
                by_bound[bound].append(queue_id)
        aged = Q()
        for bound, queue_ids in by_bound.items():
            cutoff = from_epoch(aged_cutoff(bound, at) + 1.0)
            aged |= Q(queue_id__in=queue_ids, queue_order_at__lte=cutoff)
        if by_bound:
            oldest = (
                in_tree.filter(competing)
                .filter(aged)
                .annotate(
                    rank=Window(
                        RowNumber(),
                        partition_by=[F("queue_id")],
                        order_by=[F("queue_order_at").asc(), F("id").asc()],
                    )
                )
            )
            for row in oldest.filter(rank__lte=head).values(*WORKLOAD_FIELDS):
                cands[row["queue_id"]][row["id"]] = row
        for queue_id, found in cands.items():
            first = sorted(found.values(), key=row_order_key(bounds.get(queue_id), at))[:head]
            for row in first:
                rows[row["id"]] = row
        for workload_id, quota_id, request in in_tree.filter(competing).values_list(
            "id", "quota_id", "total_request"
        ):
            if workload_id in rows:
                continue
            unlisted += 1
            bucket = unlisted_demand.setdefault(id_to_quota[quota_id], {})
            for resource, amount in (request or {}).items():
                bucket[resource] = bucket.get(resource, 0) + int(amount)
    return rows, unlisted_demand, unlisted


def _workload_specs(
    rows: Iterable[Mapping[str, Any]],
    quota_names: Mapping[int, str],
    queue_names: Mapping[int, str],
    reuse: dict[int, tuple[Mapping[str, Any], WorkloadSpec]] | None = None,
) -> tuple[WorkloadSpec, ...]:
    """The engine's view of the rows. ``reuse``: a world's specs of earlier cycles, kept
    for as long as their row (the same object) is unchanged."""
    cache: dict[str, tuple[PodSet, ...]] = {}
    specs = []
    for row in rows:
        if reuse is not None:
            known = reuse.get(row["id"])
            if known is not None and known[0] is row:
                specs.append(known[1])
                continue
        spec = WorkloadSpec(
            id=row["id"],
            name=row["name"],
            quota=quota_names[row["quota_id"]],
            queue=queue_names[row["queue_id"]],
            priority=row["priority"],
            queue_order_at=row["queue_order_at"].timestamp(),
            pod_sets=engine_pod_sets(row["pod_sets"], cache),
            phase=row["phase"],
            requeue_at=epoch(row["requeue_at"]),
            attempts=row["attempts"],
            expected_runtime_s=row["expected_runtime_s"],
            admitted_at=epoch(row["admitted_at"]),
            started_at=epoch(row["started_at"]),
            assignment={node: Resources(held) for node, held in (row["assignment"] or {}).items()},
            preempted_by=row["preempted_by_id"],
            nominated=row["nominated"],
            preemptible=row["preemptible"],
            awaiting=row["awaiting"],
        )
        if reuse is not None:
            reuse[row["id"]] = (row, spec)
        specs.append(spec)
    return tuple(specs)


def _node_spec(node: NodeInfo, elsewhere: Mapping[str, int] | None) -> NodeSpec:
    reserved = dict(node.reserved)
    for resource, amount in (elsewhere or {}).items():
        reserved[resource] = reserved.get(resource, 0) + amount
    return NodeSpec(
        name=node.name,
        allocatable=Resources(node.allocatable),
        reserved=Resources(reserved),
        held_elsewhere=Resources(dict(elsewhere or {})),
        labels=dict(node.labels),
        taints=tuple(
            Taint(
                key=str(t.get("key", "")),
                value=str(t.get("value", "")),
                effect=str(t.get("effect", "NoSchedule")),
            )
            for t in node.taints
        ),
        unschedulable=node.unschedulable,
    )
