"""Celery tasks: thin wrappers around plain functions that tests call directly."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any

from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(name="queueing.tick", ignore_result=True)
def tick() -> dict[str, Any]:
    """Sync with the cluster, then run the admission cycle of every quota tree (or, as a
    dispatcher, wake what woken tasks do not cover: admission.tick). A tick that starts
    within half an interval of the last one does nothing (``wake.tick_due``)."""
    from django.conf import settings

    from queueing import trace, wake
    from queueing.admission import tick as run_tick

    trace.mark("task", kind="tick", late_ms=_late_ms(tick.request))
    if not wake.tick_due(settings.KQ_CYCLE_INTERVAL_S):
        # Queued behind a long task with the tick before it, which just ran.
        trace.mark("task_done", kind="tick", ms=0.0, cycled=0, skipped=True)
        return {"skipped": True}
    summary = run_tick(dispatch=True).as_dict()
    trace.mark(
        "task_done",
        kind="tick",
        ms=summary["duration_ms"],
        cycled=len(summary["roots"]),
        threads=_threads(),
    )
    if summary["admitted"] or summary["preempted"] or summary["errors"]:
        log.info("cycle: %s", summary)
    return summary


# Acknowledged as it starts, not after (acks_late off, unlike the other tasks): a react
# is a hint, its work is redone from the database by any later one, and its lease and
# fence keep a cycle single whoever runs it. Kept unacknowledged, a react whose solo-pool
# worker is SIGKILLed would sit in Redis's unacked set for the visibility timeout (an
# hour), come back long expired and be dropped -- or, with a short timeout, come back as
# a duplicate of the retry that already ran. A crash loses at most the react running
# and those received with a countdown; the restarted worker wakes a sync and every tree
# (wake.on_worker_start) and beat's tick catches the rest.
@shared_task(name="queueing.react", ignore_result=True, acks_late=False)
def react(target: str, stamp: float | None = None) -> dict[str, Any]:
    """A woken task (queueing.wake): a tree's cycle, "sync" (the sync, which wakes the
    trees it touched) or "*" (a wake of every tree). ``stamp``: its wake key's value
    (nothing to do if another task took that wake: ``wake.claim``)."""
    from queueing import trace
    from queueing.admission import react as run_react

    trace.mark("task", kind="react", target=target, late_ms=_late_ms(react.request))
    summary = run_react(target, stamp=stamp).as_dict()
    trace.mark(
        "task_done",
        kind="react",
        target=target,
        ms=summary["duration_ms"],
        woken=len(summary["woken"]),
        cycled=len(summary["roots"]),
        threads=_threads(),
    )
    if summary["admitted"] or summary["preempted"] or summary["errors"]:
        log.info("react %s: %s", target, summary)
    return summary


# Acknowledged as it starts, as a react is: a forecast is redone by the next request.
@shared_task(name="queueing.forecast", ignore_result=True, acks_late=False)
def forecast(root: str) -> dict[str, Any]:
    """The forecaster's work for one tree (queueing.forecaster): what its waiting show."""
    from queueing import forecaster, wake

    try:
        wake.cache.delete(forecaster.request_key(root))  # a request from now on sends again
    except Exception:
        log.warning("could not drop the forecast request of %s", root, exc_info=True)
    return forecaster.forecast_tree(root)


def _threads() -> dict[int, str] | None:
    """Native id -> name of this process's threads (the trace's CPU per thread)."""
    from queueing import trace

    if not trace.on():
        return None
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}


def _late_ms(request: Any) -> float | None:
    """How long after its due time (its ETA) a task started; None without an ETA."""
    eta = getattr(request, "eta", None)
    if not eta:
        return None
    try:
        due = datetime.fromisoformat(eta) if isinstance(eta, str) else eta
        return round((time.time() - due.timestamp()) * 1000, 1)
    except (TypeError, ValueError):
        return None


@shared_task(name="queueing.sync_cluster", ignore_result=True)
def sync_cluster() -> dict[str, Any]:
    from queueing.sync import sync_cluster as run_sync

    return run_sync().as_dict()


@shared_task(name="queueing.demo_trickle", ignore_result=True)
def demo_trickle() -> int:
    """Keep the demo moving: submit a few jobs of several sizes."""
    from queueing.demo import trickle

    return trickle()
