"""The telling in the watcher process (``manage.py watch_cluster``), off the workers.

What the sync tells the cluster after its writes (``kubesync.tell``: Events on the jobs,
the ElasticQuotas' and Namespaces' annotations) is advice no decision waits for, yet in
a worker it runs beside the cycles and competes with them for the process's GIL (in
the end-to-end benchmark the worker's ``kq-tell`` thread spent ~11 s of CPU, a quarter
of what the main thread spent cycling). The watcher runs in every Kubernetes deployment
(``deploy/watch.yaml``, ``make run``) and is idle between the cluster's changes: it
tells instead, from the same cursors, under the same ``telling`` lease.

The watcher's teller *holds* the lease while it lives (renewed as ``lease.keep`` does,
at half its TTL), so one teller tells at a time across the watcher and the workers. A
worker's sync that finds the lease held stops trying for ``WORKER_BACKOFF_S``
(``kubesync``): a worker spends one statement every few seconds, not a thread hop and
a statement per sync. A killed or stuck watcher stops renewing: its lease expires after
``KQ_CYCLE_LEASE_S`` and the workers' syncs tell again from the cursors, as before
(nothing lost: the timeline cursor moves only over steps told).

A telling happens every ``interval_s`` (0.5 s: what a job's Events lag behind its
steps, at most, plus the telling's own time) while there is something to tell; one that
stopped at its budget is followed by the next at once; after one that told nothing the
next waits for a change the watcher's informers see, or ``IDLE_S``.
"""

from __future__ import annotations

import logging
import os
import threading

from queueing import kubeevents, kubesync
from queueing.lease import Lease

log = logging.getLogger(__name__)

#: How often the watcher tells, at most (and at least, with nothing new: a cheap read).
INTERVAL_S = 0.5
#: With nothing told last time, the next telling waits for a change the watcher's
#: informers see (what follows a timeline step: a job created, admitted, finished), or
#: this long (the annotations, and steps no job change follows): an idle cluster costs
#: a telling's few reads every 2 s, not every 0.5 s.
IDLE_S = 2.0
#: Steps per telling here: no sync waits for it, so a larger batch (fewer reads per
#: Event) within the same time budget per telling.
BUDGET = 200
TIME_BUDGET_S = 0.5
#: The teller's thread runs at this nice value: advice, it yields the cores to the
#: cycles, the API server and the database when they need them, and catches up when
#: they do not (its Events lag a busy minute, in order, none skipped before ``STALE``).
NICE = 10


def lower_priority(nice: int = NICE) -> bool:
    """Make the calling thread yield the cores (Linux: ``setpriority`` on a thread id
    sets that thread's nice value only); False where the system does not allow it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError):  # not Linux, or not permitted: full priority
        return False
    return True


class Teller:
    """Tells the cluster, in a thread of its own, while it holds the ``telling`` lease."""

    def __init__(
        self,
        cluster: object,
        *,
        interval_s: float = INTERVAL_S,
        idle_s: float = IDLE_S,
    ) -> None:
        self.cluster = cluster
        self.interval_s = interval_s
        self.idle_s = idle_s
        self.wake = threading.Event()
        self.tellings = 0
        self.written = 0  # Events the last telling wrote
        self.held: Lease | None = None  # while this teller holds the lease
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(
            target=self.run, args=(stop,), daemon=True, name="kq-teller"
        )
        self._thread.start()

    def join(self, timeout_s: float = 10.0) -> None:
        if self._thread is not None:
            self.wake.set()
            self._thread.join(timeout_s)

    def poke(self, _reason: str = "") -> None:
        """The cluster changed (the watcher's informers): tell within ``interval_s``."""
        self.wake.set()

    def run(self, stop: threading.Event) -> None:
        from django.db import connection

        lower_priority()
        try:
            while not stop.is_set():
                connection.close_if_unusable_or_obsolete()
                behind = False
                try:
                    behind = self.once()
                except Exception:  # advice: logged, the next round tries again
                    log.exception("could not tell the cluster what happened")
                if behind:
                    continue
                self.wake.clear()
                if not self.written:  # nothing new: until the cluster changes, or idle_s
                    self.wake.wait(self.idle_s)
                stop.wait(self.interval_s)  # one telling per interval at most
        finally:
            self.release()
            connection.close()

    def once(self) -> bool:
        """One telling if the lease is ours; True when it stopped at its budget."""
        from django.utils import timezone

        self.written = 0
        if not self.hold():
            return False
        self.written = kubesync.tell(
            self.cluster, timezone.now(), budget=BUDGET, time_budget_s=TIME_BUDGET_S
        )
        self.tellings += 1
        return kubeevents.behind()

    def hold(self) -> bool:
        """Take the lease, or keep it (renewed at half its TTL); False: another holds it."""
        from queueing import lease as leases

        if self.held is not None:
            self.held = leases.keep(self.held)
            if self.held is None:
                log.warning("the telling lease was lost; taking it again when it is free")
        if self.held is None:  # a holder of its own: never mistaken for this process's syncs
            self.held = leases.acquire("telling", holder=f"{leases.worker_id()}:teller")
        return self.held is not None

    def release(self) -> None:
        from queueing import lease as leases

        if self.held is not None:
            try:
                leases.release(self.held)  # a worker tells at its next sync
            except Exception:
                log.exception("could not release the telling lease")
            self.held = None
