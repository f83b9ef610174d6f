"""The workload timeline as Kubernetes Events on the jobs (issue 12 item 5).

Called by the sync after its writes (``sync_cluster``); the adapter's ``EventRecorder``
deduplicates and rate-limits. What becomes an Event:

| Timeline step | Event (type, reason) |
|---|---|
| first Pending | Normal ``Queued``: the queue and quota |
| → Admitted | Normal ``Admitted``: the quota and pool |
| → Preempted | Warning ``Preempted``: why |
| Admitted/Preempted/Running → Pending/Backoff | Normal ``Requeued``: why |
| → Cancelled | Warning ``Cancelled`` (``MaximumExecutionTimeExceeded`` when stopped at its time limit) |
| a waiting job's explanation changes kind | Normal ``Pending<Kind>``: the explanation (looked at every ``PENDING_EVERY``) |

Running, Succeeded and Failed are the job controller's to report. The timeline cursor
(the last WorkloadEvent id published) is kept in the cache shared by the workers, so a
restarted worker goes on where the last one stopped (it is written once per telling,
after the steps told: a worker killed in between tells those steps again, which the
recorder folds into the same Events' counts); a worker's sync publishes at most
``BUDGET`` steps and spends at most ``TIME_BUDGET_S`` on it (the rest follow at the
next; the watcher's teller, ``queueing.teller``, has budgets of its own and goes on at
once while ``behind()``), and steps older than ``STALE`` are skipped: a burst of thousands of jobs is told,
not replayed an hour late, and never slows the sync by more than that.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from django.conf import settings
from django.core.cache import cache
from django.db.models import Max
from django.db.models.fields.json import KT

from queueing.choices import WAITING_PHASES, Phase
from queueing.cluster.base import JobRef
from queueing.cluster.events import KubeEvent
from queueing.models import Workload, WorkloadEvent

log = logging.getLogger(__name__)

CURSOR_KEY = "kq:kube-events:cursor"
BUDGET = 50
#: Steps (and Pending<Kind> Events) handed to the recorder at once, between looks at the
#: time budget: what one pipelined write carries (``pipeline.MAX_REQUESTS``).
CHUNK = 32
TIME_BUDGET_S = 0.2  # of each sync, at most
STALE = timedelta(minutes=10)
#: Waiting jobs are looked at for explanations that changed kind at most this often per
#: process (each look reads every waiting row a forecast rewrote since the last: at 10,000
#: waiting, 13 ms of the server's time; a teller that is behind tells several times a
#: second). A Pending<Kind> Event is told at most this much later.
PENDING_EVERY = timedelta(seconds=2)
_explained: dict[int, str] = {}  # workload id -> explanation kind last told (this process)
_since: dict[str, datetime] = {}  # "pending" -> when waiting workloads were last looked at
_behind = False  # the last publish of this process stopped at its budget


@runtime_checkable
class EventSink(Protocol):
    def record_events(self, events: Iterable[KubeEvent]) -> int: ...


def _camel(code: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in code.replace("-", "_").split("_"))


def step_event(row: dict[str, Any]) -> KubeEvent | None:
    """The Event of one timeline step (None: nothing to tell)."""
    ref = JobRef(
        row["workload__kind"],
        row["workload__api_version"],
        row["workload__namespace"],
        row["workload__name"],
        row["workload__object_uid"],
    )
    to, before = row["to_phase"], row["from_phase"]
    why = row["message"] or row["reason"] or ""
    quota, queue = row["workload__quota__name"], row["workload__queue__name"]
    if to == Phase.PENDING and not before:
        return KubeEvent(ref, "Queued", f"Queued in queue {queue} of quota {quota}.", at=row["at"])
    if to == Phase.ADMITTED:
        pool = row["workload__pool"]
        where = f" on pool {pool}" if pool else ""
        return KubeEvent(ref, "Admitted", f"Admitted by quota {quota}{where}.", at=row["at"])
    if to == Phase.PREEMPTED:
        return KubeEvent(ref, "Preempted", why or "Preempted.", "Warning", row["at"])
    if to in WAITING_PHASES and before in (Phase.ADMITTED, Phase.PREEMPTED, Phase.RUNNING):
        return KubeEvent(ref, "Requeued", why or f"Back in queue {queue}.", at=row["at"])
    if to == Phase.CANCELLED:
        # A stop at the running time limit keeps its own reason (koord-queue's).
        code = row["reason"] if row["reason"] == "MaximumExecutionTimeExceeded" else "Cancelled"
        return KubeEvent(ref, code, why or "Cancelled.", "Warning", row["at"])
    return None


STEP_FIELDS = (
    "id",
    "at",
    "from_phase",
    "to_phase",
    "reason",
    "message",
    "workload__kind",
    "workload__api_version",
    "workload__namespace",
    "workload__name",
    "workload__object_uid",
    "workload__quota__name",
    "workload__queue__name",
    "workload__pool",
)


def _steps(now: datetime, budget: int = BUDGET) -> list[tuple[int, KubeEvent | None]]:
    """The timeline steps after the cursor: (step id, its Event or None)."""
    cursor = cache.get(CURSOR_KEY)
    if cursor is None:  # first run (or a flushed cache): from now on, not the history
        cursor = WorkloadEvent.objects.aggregate(last=Max("id"))["last"] or 0
        cache.set(CURSOR_KEY, cursor, None)
        return []
    rows = (
        WorkloadEvent.objects.filter(id__gt=cursor)
        .exclude(workload__object_uid="")
        .order_by("id")
        .values(*STEP_FIELDS)[:budget]
    )
    return [(row["id"], step_event(row) if now - row["at"] <= STALE else None) for row in rows]


def _pending(now: datetime, budget: int = BUDGET) -> list[tuple[int, str, KubeEvent]]:
    """Waiting jobs whose explanation changed kind since they were last looked at."""
    since = _since.get("pending")
    _since["pending"] = now
    query = Workload.objects.filter(phase__in=WAITING_PHASES).exclude(object_uid="")
    if since is not None:
        query = query.filter(updated_at__gte=since - timedelta(seconds=1))
    out: list[tuple[int, str, KubeEvent]] = []
    # Only the explanation's kind, read in the database: decoding the whole document of
    # each row was a twentieth of a telling's samples in the end-to-end benchmark.
    for row in query.values(
        "id",
        "kind",
        "api_version",
        "namespace",
        "name",
        "object_uid",
        "reason",
        explained=KT("explanation__kind"),
    )[: budget * 10]:
        kind = row["explained"] or ""
        if not kind or _explained.get(row["id"]) == kind:
            continue
        ref = JobRef(
            row["kind"], row["api_version"], row["namespace"], row["name"], row["object_uid"]
        )
        event = KubeEvent(ref, f"Pending{_camel(kind)}", row["reason"] or kind, at=now)
        out.append((row["id"], kind, event))
    if len(_explained) > 200_000:
        _explained.clear()  # told again at most once: bounded memory over a long life
    return out[:budget]


def behind() -> bool:
    """Whether the last ``publish`` of this process stopped at its budget (steps or time)
    with more to tell: a teller with nothing else to do goes on at once."""
    return _behind


def publish(
    cluster: Any,
    now: datetime,
    *,
    clock: Any = time.monotonic,
    budget: int = BUDGET,
    time_budget_s: float = TIME_BUDGET_S,
    chunk: int = CHUNK,
) -> int:
    """Tell the cluster what happened since the last sync; returns Events written.

    At most ``time_budget_s`` and ``budget`` steps go to it: what is left waits for the
    next telling (the cursor moves only over the steps told). The time budget is looked
    at before each ``chunk`` of steps (and of Pending<Kind> Events)."""
    global _behind
    _behind = False
    if not getattr(settings, "KQ_KUBE_EVENTS", True) or not isinstance(cluster, EventSink):
        return 0
    deadline = clock() + time_budget_s
    written = 0
    told: int | None = None  # the last step told: the cursor is written once, at the end
    try:
        try:
            steps = _steps(now, budget)
            if len(steps) >= budget:
                _behind = True
            # A chunk of steps at a time: the recorder pipelines a chunk's new Events
            # down one connection (one round trip, not one per Event).
            for start in range(0, len(steps), chunk):
                if clock() > deadline:
                    _behind = True
                    return written
                part = steps[start : start + chunk]
                events = [event for _, event in part if event is not None]
                if events:
                    written += cluster.record_events(events)
                told = part[-1][0]
        finally:
            if told is not None:
                cache.set(CURSOR_KEY, told, None)
        since = _since.get("pending")
        due = since is None or now - since >= PENDING_EVERY or now < since
        pending = _pending(now, budget) if due else []
        for start in range(0, len(pending), chunk):
            if clock() > deadline:
                _since.pop("pending", None)  # look at them all again next time
                break
            told_now = pending[start : start + chunk]
            written += cluster.record_events([event for _, _, event in told_now])
            for workload_id, kind, _event in told_now:
                _explained[workload_id] = kind
    except Exception:  # Events are advice: never the reason a sync fails
        log.exception("could not publish Kubernetes Events")
    return written
