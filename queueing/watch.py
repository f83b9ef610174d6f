"""The long-lived watch (kubernetes mode): start a cycle as soon as the cluster changes.

The sync and the cycle run in Celery workers; beat's timer reconciles periodically. The
watch makes them react: informers follow jobs, nodes and bound pods, and a change that
can alter a decision (a job finished, appeared, vanished or changed state; a node or
free capacity changed) wakes the cycle worker for a sync, which wakes the cycles of the
trees it touched (queueing.wake; a node's change wakes every tree).
Bursts are coalesced: at most one trigger per ``debounce_s``, and wakes are debounced
again on their way. With ``KQ_KUBE_LIVE_CONFIG`` it also watches the configuration
objects (ElasticQuotas, ElasticQuotaTrees, Queues; ``ConfigWatcher``): an edit marks the
configuration changed and wakes a sync, which applies it (``queueing.kubeconfig``). If the watch is down, nothing is lost
but latency. ``python manage.py watch_cluster`` is a thin wrapper around ``run_watch``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping

from queueing.cluster.kubernetes import ClusterWatcher, KubernetesCluster
from queueing.cluster.kubernetes.configwatch import ConfigWatcher

log = logging.getLogger(__name__)

Trigger = Callable[[Mapping[str, int]], None]


def enqueue_tick(reasons: Mapping[str, int]) -> None:
    """Wake the cycle worker for a sync, which wakes the trees it touches (``wake_sync``);
    with wakes off, ask for a tick (one nobody picks up soon is useless, so it expires)."""
    from django.conf import settings

    from queueing import wake
    from queueing.tasks import tick

    if wake.enabled():
        wake_sync(reasons)
    else:
        tick.apply_async(expires=max(settings.KQ_CYCLE_INTERVAL_S * 2, 2.0))
    log.debug("cycle requested after %s", dict(reasons))


def live_config() -> bool:
    from django.conf import settings

    return bool(getattr(settings, "KQ_KUBE_LIVE_CONFIG", False))


class Coalescer:
    """Many changes in a burst, one trigger: the first change arms a timer of
    ``debounce_s``; the changes until it fires ride along with it. Safe to call from
    any thread (informers call it from theirs).

    The trigger runs in one long-lived thread of the Coalescer's own, started on first
    use (again in a forked child, which inherits no threads). A thread per burst (a
    ``threading.Timer``) cost its start and, worse, a new Redis connection for the
    wake's cache key each time, since Django's caches are per thread: about 3 ms of
    CPU per burst against 0.3 ms (the end-to-end benchmark's cycler fires a few
    hundred bursts per thousand Jobs). A change that arrives while the trigger runs
    waits for it to return, then for ``debounce_s``, and is carried by the next one."""

    def __init__(self, trigger: Trigger, debounce_s: float = 0.02) -> None:
        self.trigger = trigger
        self.debounce_s = debounce_s
        self._lock = threading.Lock()
        self._armed = threading.Condition(self._lock)
        self._reasons: Counter[str] = Counter()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.fired = 0

    def __call__(self, reason: str) -> None:
        with self._lock:
            self._reasons[reason] += 1
            if self._thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, daemon=True, name="kq-coalescer")
                self._thread.start()
            self._armed.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._reasons:
                    self._armed.wait()
            time.sleep(self.debounce_s)  # let the rest of the burst arrive
            self._fire()

    def _fire(self) -> None:
        with self._lock:
            batch = dict(self._reasons)
            self._reasons.clear()
        try:
            self.trigger(batch)
            self.fired += 1
        except Exception:  # the broker may be down; beat's timer still runs ticks
            log.exception("could not wake the cycle after a cluster change")


def wake_sync(reasons: Mapping[str, int]) -> None:
    """Wake a sync (queueing.wake), which wakes the trees whose workloads it moves; a
    node that came, went or changed also wakes every tree (no workload moves for it, and
    any tree may place on it). Nothing when wakes are off (beat's tick follows then)."""
    from queueing import wake

    said = ",".join(sorted(reasons))[:100]
    wake.wake(None, sync=True, reason=said)
    if any(reason.startswith("node ") for reason in reasons):
        wake.wake(None, reason=said)


def wake_on_own_informers(cluster: KubernetesCluster) -> None:
    """The cycle process's own watch cache (KQ_KUBE_WATCH_CACHE) wakes its cycle when
    it sees a job finish, appear, vanish or change state, or capacity change: the same
    reasons the ``watch_cluster`` process wakes it for, so a deployment without that
    process (``make run``) reacts at once too. Both at once cost nothing: a wake already
    on its way takes the other along (queueing.wake)."""
    cluster.reader.on_change = Coalescer(wake_sync)


def run_watch(
    cluster: KubernetesCluster,
    stop: threading.Event,
    *,
    trigger: Trigger = enqueue_tick,
    debounce_s: float = 0.2,
    watch_timeout_s: int = 300,
    also: Callable[[str], None] | None = None,
    wakes: bool = True,
) -> int:
    """Watch until ``stop`` is set; returns how many triggers were sent. ``also`` hears
    every change too (the watcher's teller: ``queueing.teller``).

    ``wakes=False`` (``KQ_WATCH_WAKES``): no informers over jobs, nodes and pods here,
    where every cycle worker's own watch cache wakes it for the same changes
    (``wake_on_own_informers``). A second copy of each of those watches cost the
    watcher a core's tenth and the API server as many events again; only the
    configuration objects are still watched here (``KQ_KUBE_LIVE_CONFIG``)."""
    changed = threading.Event()
    reasons: Counter[str] = Counter()
    lock = threading.Lock()

    def on_change(reason: str) -> None:
        with lock:
            reasons[reason] += 1
        changed.set()
        if also is not None:
            also(reason)

    def on_config(reason: str) -> None:
        # The next sync applies the configuration objects at once (not at its next
        # periodic look): kubeconfig.mark_changed, then a sync like any other change.
        from queueing import kubeconfig

        kubeconfig.mark_changed()
        on_change(reason)

    watcher: ClusterWatcher | None = None
    if wakes:
        watcher = ClusterWatcher(cluster, on_change, watch_timeout_s=watch_timeout_s)
        watcher.start()
    config: ConfigWatcher | None = None
    if live_config():
        config = ConfigWatcher(cluster, on_config, watch_timeout_s=watch_timeout_s)
        config.start()
    sent = 0
    try:
        while not stop.is_set():
            if not changed.wait(timeout=0.5):
                continue
            stop.wait(debounce_s)  # let a burst of events arrive, then trigger once
            changed.clear()
            with lock:
                batch = dict(reasons)
                reasons.clear()
            try:
                trigger(batch)
                sent += 1
            except Exception:  # the broker may be down; beat's timer still runs ticks
                log.exception("could not request a tick")
    finally:
        if watcher is not None:
            watcher.stop()
        if config is not None:
            config.stop()
    return sent
