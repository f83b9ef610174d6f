"""What the engine's forecast learns from history, read from the database.

The engine (``queueing.engine.eta``) turns its forward simulation into calibrated,
steady ETAs when the snapshot carries what happened before (see the docstrings of
``Snapshot`` and ``queueing.engine.calibration``): each queue's ratio of actual to
declared runtime, the error of earlier first forecasts per class (QBETS residuals),
the offered load of recent arrivals per root and priority, and the recent arrivals
themselves (the forecast's draws replay work like them), the ETAs the previous cycle
published (hysteresis) and how often cycles run. The virtual-time simulator keeps these
in memory (``calibration.EtaRecorder``); the live system keeps them in the database --
``Workload.eta`` and the ``eta_first_*`` fields written by the cycle's annotation step
(``queueing.state.annotate``) -- so they survive workers and restarts.

``with_history`` is the one call ``build_snapshot`` makes, and only a cycle that runs the
forecast reads anything there: a woken cycle without it (``state.forecast_due``) gets the
snapshot as it is, without a query. The runtime ratios are the same for every tree and
are kept per process for ``KQ_HISTORY_TTL_S`` (they move with finishes, over a window of
the last RATIO_WINDOW per queue); the residuals and the arrival load are kept per tree
for ``TTL_S``; the previous ETAs are read by every forecasting cycle (hysteresis needs
the last ones).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings

from queueing.choices import WAITING_PHASES, Phase
from queueing.engine.calibration import (
    ARRIVALS,
    HISTORY_S,
    SQUARES,
    Residuals,
    eta_classes,
    held_for,
    overdue_errors,
)
from queueing.engine.types import Eta, PodSet, Snapshot, WorkloadSpec
from queueing.models import Workload
from queueing.podsets import engine_pod_sets

if TYPE_CHECKING:
    from queueing.state.snapshot import SnapshotIndex
    from queueing.world import TreeWorld

__all__ = [
    "ARRIVAL_HISTORY_S",
    "ARRIVAL_WINDOW_S",
    "TTL_S",
    "arrival_load",
    "clear_cache",
    "cycle_interval_s",
    "eta_residuals",
    "first_created",
    "previous_etas",
    "recent_arrivals",
    "runtime_ratio",
    "runtime_ratio_cached",
    "stored_eta",
    "with_history",
]

#: How long a tree's learnt inputs are reused (s).
TTL_S = 15.0
#: Finished workloads whose runtimes make a queue's ratio; at least RATIO_MIN of them.
RATIO_WINDOW = 200
RATIO_MIN = 5
#: Admitted workloads whose first forecasts make the residuals (calibration's window).
RESIDUAL_WINDOW = 300
#: Arrivals counted in the offered load (s), as ``calibration.ArrivalLoad``.
ARRIVAL_WINDOW_S = 300.0
#: How far back the arrivals the forecast replays go (s), as ``calibration.ArrivalLoad``.
ARRIVAL_HISTORY_S = HISTORY_S
#: At most this many recent arrivals are handed to the forecast (the latest).
RECENT_ARRIVALS_MAX = 2_000

_cache: dict[tuple[str, frozenset[int]], tuple[float, dict[str, Any]]] = {}
_ratios: dict[frozenset[tuple[int, str]], tuple[float, dict[str, tuple[float, float]]]] = {}


def clear_cache() -> None:
    """Forget what was learnt (tests; a process that changed the history under it)."""
    _cache.clear()
    _ratios.clear()


def runtime_ratio_cached(queue_ids: Mapping[int, str]) -> dict[str, tuple[float, float]]:
    """``runtime_ratio`` as a cycle of this process read it in the last KQ_HISTORY_TTL_S
    (every tree's snapshot lists the same queues: one read serves them all)."""
    key = frozenset(queue_ids.items())
    hit = _ratios.get(key)
    if hit is not None and time.monotonic() - hit[0] < settings.KQ_HISTORY_TTL_S:
        return hit[1]
    value = runtime_ratio(queue_ids)
    _ratios.clear()
    _ratios[key] = (time.monotonic(), value)
    return value


def cycle_interval_s() -> float:
    """How often cycles run, for the forecast: 0 when events wake them (queueing.wake),
    else the beat's interval (work that ends between two ticks starts at the next)."""
    return 0.0 if settings.KQ_WAKE else float(settings.KQ_CYCLE_INTERVAL_S)


def runtime_ratio(queue_ids: Mapping[int, str]) -> dict[str, tuple[float, float]]:
    """Per queue: (p50, p90) of actual / declared runtime over its last finished
    workloads that declared one (a declared runtime is a limit, work ends before it)."""
    rows = (
        Workload.objects.filter(
            queue_id__in=list(queue_ids),
            phase=Phase.SUCCEEDED,
            started_at__isnull=False,
            finished_at__isnull=False,
            expected_runtime_s__gt=0,
        )
        .order_by("-finished_at")
        .values_list("queue_id", "started_at", "finished_at", "expected_runtime_s")[
            : RATIO_WINDOW * max(1, len(queue_ids))
        ]
    )
    ratios: dict[int, list[float]] = {}
    for queue_id, started, finished, declared in rows:
        if started is None or finished is None or not declared:  # filtered out; for mypy
            continue
        got = ratios.setdefault(queue_id, [])
        if len(got) < RATIO_WINDOW:
            got.append(max(0.0, (finished - started).total_seconds()) / declared)
    out: dict[str, tuple[float, float]] = {}
    for queue_id, xs in ratios.items():
        if len(xs) < RATIO_MIN:
            continue
        ordered = sorted(xs)
        # The same order statistics as the simulator's recorder (calibration.EtaRecorder).
        out[queue_ids[queue_id]] = (
            ordered[len(ordered) // 2],
            ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        )
    return out


def eta_residuals(
    quota_ids: Iterable[int], queue_ids: Mapping[int, str], now: datetime
) -> dict[str, tuple[float | None, float]]:
    """Per class (``calibration.eta_classes``): the p50's shift (``Residuals.shift``,
    None for a class with too few) and the QBETS p90 bound of the relative error of first
    forecasts, over the tree's last admitted workloads, with the censored errors of
    those still waiting past their forecast (``Residuals.quantiles``)."""
    residuals = Residuals(window=RESIDUAL_WINDOW)
    quota_list = list(quota_ids)
    measured = (
        Workload.objects.filter(
            quota_id__in=quota_list,
            eta_first_forecast__isnull=False,
            first_seen_at__isnull=False,
            admitted_at__isnull=False,
            # The first wait only: a workload evicted and admitted again keeps the first
            # forecast of its first wait, which says nothing of the later one.
            attempts=1,
        )
        .order_by("-admitted_at")
        .values_list("queue_id", "priority", "first_seen_at", "eta_first_forecast", "admitted_at")[
            :RESIDUAL_WINDOW
        ]
    )
    for queue_id, priority, seen, forecast, admitted in reversed(list(measured)):
        if seen is None or forecast is None or admitted is None:  # filtered out; for mypy
            continue
        if admitted < seen:  # admitted before this wait's first forecast: not its wait
            continue
        residuals.add(
            eta_classes(queue_ids.get(queue_id, ""), priority),
            (forecast - seen).total_seconds(),
            (admitted - seen).total_seconds(),
        )
    waiting = Workload.objects.filter(
        quota_id__in=quota_list,
        phase__in=WAITING_PHASES,
        eta_first_forecast__isnull=False,
        first_seen_at__isnull=False,
        eta_first_forecast__lt=now,
        attempts=0,
    ).values_list("queue_id", "priority", "first_seen_at", "eta_first_forecast")
    overdue = overdue_errors(
        (
            eta_classes(queue_ids.get(queue_id, ""), priority),
            (forecast - seen).total_seconds(),
            (now - seen).total_seconds(),
        )
        for queue_id, priority, seen, forecast in waiting
        if seen is not None and forecast is not None  # filtered out; for mypy
    )
    return residuals.quantiles(overdue)


def first_created(quota_ids: Mapping[str, int]) -> datetime | None:
    """When the tree's oldest workload was created, None when it has none: a system
    younger than a history's window has seen its arrivals over a shorter span."""
    return (
        Workload.objects.filter(quota_id__in=list(quota_ids.values()))
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )


def arrival_load(
    snapshot: Snapshot,
    quota_ids: Mapping[str, int],
    ratio: Mapping[str, tuple[float, float]],
    queue_ids: Mapping[int, str],
    now: datetime,
    oldest: datetime | None,
    interval: float = 0.0,
) -> dict[str, dict[int, dict[str, float]]]:
    """Per queue, priority and resource: the offered load of the workloads that arrived
    in the last ARRIVAL_WINDOW_S, as a fraction of their tree's capacity of it (the
    cluster, capped by the root's max) -- ``calibration.ArrivalLoad`` over the
    database's history.

    ``interval``: how often cycles run (0 when events wake them). A job holds its quota
    until the first cycle after its end, so its work is its runtime rounded up to the
    interval: Kueue's baseline in 1-s cycles, 0.2-s and 0.5-s jobs, read as 1.08-1.25
    of the capacity serving a queue where 1.33 arrived (``eta``'s overload bound, and
    its p90, took the lower figure). ``oldest``: when the tree's first workload was
    created (:func:`first_created`), None when it has none."""
    parent = {q.name: q.parent for q in snapshot.quotas}
    maxes = {q.name: q.max for q in snapshot.quotas}
    cap: dict[str, int] = {}
    for n in snapshot.nodes:
        if not n.unschedulable:
            for k, v in n.allocatable.items():
                cap[k] = cap.get(k, 0) + v - n.reserved.get(k, 0)
    root_of: dict[str, str] = {}
    for name in parent:
        at = name
        while parent[at] is not None:
            at = parent[at]  # type: ignore[assignment]
        root_of[name] = at
    caps: dict[str, dict[str, int]] = {}
    for root in set(root_of.values()):
        qcap = dict(cap)
        for k, m in maxes[root].items():
            if m < qcap.get(k, 0):
                qcap[k] = m
        caps[root] = qcap
    names = {qid: name for name, qid in quota_ids.items()}
    if oldest is None:
        return {}
    since = now - timedelta(seconds=ARRIVAL_WINDOW_S)
    tree = Workload.objects.filter(quota_id__in=list(names))
    # A system younger than the window has seen its arrivals over a shorter span.
    span = min(ARRIVAL_WINDOW_S, max((now - oldest).total_seconds(), 1.0))
    out: dict[str, dict[int, dict[str, float]]] = {}
    for quota_id, queue_id, priority, request, runtime in tree.filter(
        created_at__gte=since
    ).values_list("quota_id", "queue_id", "priority", "total_request", "expected_runtime_s"):
        found = root_of.get(names[quota_id])
        if found is None:
            continue
        root = found
        qcap = caps[root]
        seconds = runtime or 0.0
        r = ratio.get(queue_ids.get(queue_id, ""))
        if r is not None:
            seconds *= r[0]
        seconds = held_for(seconds, interval)
        acc = out.setdefault(queue_ids.get(queue_id, ""), {}).setdefault(priority, {})
        acc[ARRIVALS] = acc.get(ARRIVALS, 0.0) + 1.0
        for k, v in (request or {}).items():
            c = qcap.get(k, 0)
            if c > 0 and int(v) > 0 and seconds > 0:
                x = int(v) / c * seconds / span
                acc[k] = acc.get(k, 0.0) + x
                acc[SQUARES + k] = acc.get(SQUARES + k, 0.0) + x * x
    return out


#: What ``recent_arrivals`` reads of each arrival, then when it arrived.
_ARRIVAL_FIELDS = (
    "id",
    "name",
    "quota_id",
    "queue_id",
    "priority",
    "pod_sets",
    "expected_runtime_s",
    "preemptible",
)


def recent_arrivals(
    quota_ids: Mapping[str, int],
    queue_ids: Mapping[int, str],
    now: datetime,
    oldest: datetime | None,
    world: TreeWorld | None = None,
) -> tuple[tuple[WorkloadSpec, ...], float]:
    """The workloads of the tree that arrived in the last ARRIVAL_HISTORY_S, as the
    engine's specs (``Snapshot.recent_arrivals``: the forecast's draws replay arrivals
    like them), and the span they arrived over (``Snapshot.arrival_span_s``).

    With the tree's ``world``, from the arrivals it read (``TreeWorld.arrived``, dated
    by their queue-order time) over the span since it was first built at most: a
    cycle reads no workload the journal does not name.
    Without it, from the database. At most RECENT_ARRIVALS_MAX, the latest: the span is
    then theirs (from the oldest of them), so that each queue's rate stays what it
    was. ``oldest``: as for :func:`arrival_load`."""
    if oldest is None:
        return (), 0.0
    names = {qid: name for name, qid in quota_ids.items()}
    since = now - timedelta(seconds=ARRIVAL_HISTORY_S)
    rows: list[tuple[Any, ...]]
    if world is not None:
        # The latest first, as the database would give them (a rebuild may have found
        # some after others: ordered before the cut).
        rows = sorted(
            (
                (*(r[f] for f in _ARRIVAL_FIELDS), r["queue_order_at"])
                for r in world.arrived
                if since <= r["queue_order_at"] <= now and r["quota_id"] in names
            ),
            key=lambda r: (r[-1], r[0]),  # when it arrived, then its id
            reverse=True,
        )[:RECENT_ARRIVALS_MAX]
    else:
        rows = list(
            Workload.objects.filter(
                quota_id__in=list(names), created_at__gte=since, created_at__lte=now
            )
            .order_by("-created_at", "-id")
            .values_list(*_ARRIVAL_FIELDS, "created_at")[:RECENT_ARRIVALS_MAX]
        )
    start = oldest
    if world is not None and world.watching_since is not None:
        # The world has seen arrivals only since it was first built.
        start = max(start, world.watching_since)
    span = min(ARRIVAL_HISTORY_S, max((now - start).total_seconds(), 1.0))
    if len(rows) == RECENT_ARRIVALS_MAX:
        span = min(span, max((now - rows[-1][8]).total_seconds(), 1.0))
    cache: dict[str, tuple[PodSet, ...]] = {}
    specs = []
    for wid, name, quota_id, queue_id, priority, pod_sets, runtime, preemptible, created in rows:
        queue = queue_ids.get(queue_id)
        if queue is None or not pod_sets:
            continue
        specs.append(
            WorkloadSpec(
                id=wid,
                name=name,
                quota=names[quota_id],
                queue=queue,
                priority=priority,
                queue_order_at=created.timestamp(),
                pod_sets=engine_pod_sets(pod_sets, cache),
                expected_runtime_s=runtime,
                preemptible=preemptible,
            )
        )
    specs.reverse()
    return tuple(specs), span


def stored_eta(eta: Eta | None, before: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
    """What ``Workload.eta`` keeps of the engine's ETA: its numbers (epoch seconds, the
    exact values hysteresis compares against), the reason when there is none, the
    verdict of this cycle and the last movement (``kept`` cycles keep it, so a page can
    still say what moved the ETA it shows), and whether it starts before work ahead of
    it by age (``Eta.by_age``). Unchanged while the ETA is kept, so a kept
    ETA costs no write."""
    if eta is None:
        return {
            "p50": None,
            "p90": None,
            "reason": "",
            "moved": "",
            "last_move": None,
            "by_age": False,
        }
    last = (before or {}).get("last_move")
    if eta.moved in ("first", "earlier", "later", "overdue"):
        last = {"moved": eta.moved, "delta_s": round(eta.delta_s, 1), "at": round(now, 1)}
    elif eta.p50 is None:
        last = None
    return {
        "p50": eta.p50,
        "p90": eta.p90,
        "reason": eta.reason,
        "moved": eta.moved,
        "last_move": last,
        "by_age": eta.by_age,
    }


def previous_etas(ids: Iterable[int], quota_ids: Iterable[int], *, many: bool) -> dict[int, Eta]:
    """The ETAs the last cycle published for these waiting workloads (``Workload.eta``).
    ``many``: select by tree rather than a long IN list."""
    if many:
        query = Workload.objects.filter(quota_id__in=list(quota_ids), phase__in=WAITING_PHASES)
    else:
        query = Workload.objects.filter(id__in=list(ids))
    out: dict[int, Eta] = {}
    for workload_id, stored in query.filter(eta__isnull=False).values_list("id", "eta"):
        eta = eta_of(stored)
        if eta is not None:
            out[workload_id] = eta
    return out


def eta_of(stored: Any) -> Eta | None:
    """The ETA a stored ``Workload.eta`` document holds, if any."""
    if not isinstance(stored, dict):
        return None
    p50, p90 = stored.get("p50"), stored.get("p90")
    if isinstance(p50, int | float) and isinstance(p90, int | float):
        return Eta(float(p50), float(p90), moved=stored.get("moved", ""))
    return None


def with_history(snapshot: Snapshot, index: SnapshotIndex, *, previous: bool = True) -> Snapshot:
    """The snapshot with the forecast's inputs from history (see the module's doc).

    ``previous=False``: for an engine run without the forecast (the only reader of what
    is learnt here): nothing is read, only the cycle interval is set."""
    interval = cycle_interval_s()
    config = snapshot.config
    if config.cycle_interval_s != interval:
        config = dataclasses.replace(config, cycle_interval_s=interval)
    if not previous:
        # Only the forecast reads what is learnt here; a cycle without it reads nothing.
        return dataclasses.replace(snapshot, config=config)
    now = index.now
    quota_ids = frozenset(index.quota_ids.values())
    key = (index.root, quota_ids)
    hit = _cache.get(key)
    ratio = runtime_ratio_cached(index.queue_names)
    if hit is not None and time.monotonic() - hit[0] < TTL_S and hit[1]["runtime_ratio"] is ratio:
        learnt = hit[1]
    else:
        # The tree's age bounds the span both histories are read over: one query.
        oldest = first_created(index.quota_ids)
        recent, span = recent_arrivals(index.quota_ids, index.queue_names, now, oldest, index.world)
        learnt = {
            "runtime_ratio": ratio,
            "eta_residuals": eta_residuals(quota_ids, index.queue_names, now),
            "arrival_load": arrival_load(
                snapshot, index.quota_ids, ratio, index.queue_names, now, oldest, interval
            ),
            "recent_arrivals": recent,
            "arrival_span_s": span,
            # The tree's age: how long its inflow has been seen (the world's own span
            # may be shorter, since a rebuild; the inflow is not younger for it).
            "arrival_age_s": (now - oldest).total_seconds() if oldest is not None else 0.0,
        }
        _cache[key] = (time.monotonic(), learnt)
    waiting = [wid for wid, row in index.rows.items() if row["phase"] in WAITING_PHASES]
    # What the tree's world knows this process wrote (world.Shown) is not read again.
    shown = index.world.shown if index.world is not None else {}
    etas: dict[int, Eta] = {}
    unknown: list[int] = []
    for wid in waiting:
        known = shown.get(wid)
        if known is None:
            unknown.append(wid)
        elif (eta := eta_of(known.eta)) is not None:
            etas[wid] = eta
    if unknown:
        etas.update(previous_etas(unknown, quota_ids, many=len(unknown) > 2_000))
    return dataclasses.replace(snapshot, previous_etas=etas, config=config, **learnt)
