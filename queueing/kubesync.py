"""What the sync does for Kubernetes after its own writes (one call from sync_cluster):
apply changed configuration objects (ElasticQuotas, Queues), stop workloads past their
running time limit, tell the jobs' stories as Events, and
write the runtime quota back to the ElasticQuotas and the available queues to the
Namespaces. Each part is best-effort and
rate-limited on its own; none can fail a sync.

The telling (Events, ElasticQuota and Namespace annotations: one HTTP call each) is
advice that no decision waits for. Against an API server (an adapter that writes
concurrently, ``state.calls.can_run_in_background``) it runs in this process's one
background thread while the worker cycles the trees, under a lease of its own
(``telling``: one at a time across workers, as the sync is; a killed worker's strands
only the telling, for the lease's time, never the sync). A sync that finds the last
telling still running, here or elsewhere, skips its own: the next picks up from the
same cursors. Where ``watch_cluster`` runs, its teller (``queueing.teller``) holds that
lease while it lives and tells instead, out of the workers' processes: a sync that finds
the lease held leaves the telling alone for ``WORKER_BACKOFF_S``, and takes it back when
the watcher is gone (its lease expired)."""

from __future__ import annotations

import logging
import os
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from queueing import (
    kubeconfig,
    kubeevents,
    kubequotas,
    maxexec,
    namespacequeues,
    quotawriteback,
    trace,
)

log = logging.getLogger(__name__)


_telling: Future[None] | None = None
# Until when this process leaves the telling to the holder of its lease (monotonic): the
# watcher's teller holds it while it lives (queueing.teller); a sync that found it held
# does not try again for WORKER_BACKOFF_S.
_told_elsewhere_until = 0.0
WORKER_BACKOFF_S = 5.0
_executor: ThreadPoolExecutor | None = None
_executor_pid: int | None = None


def after_sync(cluster: Any, now: datetime) -> None:
    global _telling
    started = time.perf_counter()
    try:
        kubeconfig.sync_config(cluster)
    except Exception:  # the cluster or a refused item: the next look tries again
        log.exception("could not apply the configuration objects of the cluster")
    try:
        _enforce_limits(cluster, now)
    except Exception:  # the next sync checks again
        log.exception("could not enforce maximum execution times")
    config_ms = round((time.perf_counter() - started) * 1000, 1)
    from queueing.state.calls import can_run_in_background

    told_anything = isinstance(cluster, (kubeevents.EventSink, quotawriteback.AnnotationWriter))
    if not told_anything:
        tell(cluster, now, config_ms=config_ms)  # nothing to tell it: the trace's mark only
    elif time.monotonic() < _told_elsewhere_until:
        pass  # the watcher's teller (or another worker) tells
    elif not can_run_in_background(cluster):
        _tell_under_lease(cluster, now, config_ms)
    elif _telling is None or _telling.done():
        _telling = _pool().submit(_tell_in_background, cluster, now, config_ms)


# When this process's syncs of a cluster next read the workloads with a time limit: (the
# time of the last read, the time of the next). None: read at the next sync.
_limits_read: weakref.WeakKeyDictionary[Any, tuple[datetime, datetime]] = (
    weakref.WeakKeyDictionary()
)
# A limit is a positive whole number of seconds (compat.max_execution_s, the queue's
# setting): a workload admitted after a read runs past its limit a second later at the
# earliest; so does one whose queue's limit an edit shortened.
LIMITS_FLOOR = timedelta(seconds=1)


def _enforce_limits(cluster: Any, now: datetime) -> None:
    """Stop what ran past its time limit, reading the limited workloads only when one
    can be due: at the earliest end of those the last read found, and at least a second
    after that read (what it could not see). Most syncs -- several a second under load,
    with no limit anywhere -- read nothing."""
    last = _limits_read.get(cluster)
    if last is not None and last[0] <= now < last[1]:
        return
    found, due = maxexec.scan(now)
    floor = now + LIMITS_FLOOR
    _limits_read[cluster] = (now, floor if due is None else min(due, floor))
    if found:
        maxexec.enforce(now, found)


def tell(
    cluster: Any,
    now: datetime,
    *,
    config_ms: float | None = None,
    budget: int = kubeevents.BUDGET,
    time_budget_s: float = kubeevents.TIME_BUDGET_S,
) -> int:
    """Events, then the quotas' and namespaces' annotations; returns Events written."""
    started = time.perf_counter()
    events = kubeevents.publish(cluster, now, budget=budget, time_budget_s=time_budget_s)
    events_done = time.perf_counter()
    kubequotas.publish(cluster)  # the quotas managed here, as ElasticQuotas
    quotawriteback.publish(cluster)
    namespacequeues.publish(cluster)
    trace.mark(
        "after_sync",
        config_ms=config_ms,
        events=events,
        events_ms=round((events_done - started) * 1000, 1),
        quotas_ms=round((time.perf_counter() - events_done) * 1000, 1),
    )
    return events


def _tell_in_background(cluster: Any, now: datetime, config_ms: float) -> None:
    from django.db import connection

    connection.close_if_unusable_or_obsolete()  # this thread's own, kept between syncs
    _tell_under_lease(cluster, now, config_ms)


def _tell_under_lease(cluster: Any, now: datetime, config_ms: float | None) -> None:
    global _told_elsewhere_until
    from queueing import lease as leases

    try:
        held = leases.acquire("telling")
        if held is None:  # another worker tells right now, or the watcher's teller
            _told_elsewhere_until = time.monotonic() + WORKER_BACKOFF_S
            return
        try:
            tell(cluster, now, config_ms=config_ms)
        finally:
            leases.release(held)
    except Exception:  # advice: logged, never raised
        log.exception("could not tell the cluster what happened")


def _pool() -> ThreadPoolExecutor:
    global _executor, _executor_pid
    if _executor is None or _executor_pid != os.getpid():  # a fork has no threads
        _executor = ThreadPoolExecutor(1, thread_name_prefix="kq-tell")
        _executor_pid = os.getpid()
    return _executor


def settle(timeout_s: float = 30.0) -> None:
    """Wait for this process's telling (tests, and a worker about to stop)."""
    pending = _telling
    if pending is None:
        return
    try:
        pending.result(timeout=timeout_s)
    except Exception:
        log.warning("the cluster's telling still runs after %.0fs", timeout_s)
