"""The forecast of the waiting (positions, ETAs, reasons) off the admission path.

A forecasting cycle costs several times an admitting one (the engine's forecast of every
waiting workload and the annotations' write: 88 ms against 11 ms at the mean in
``kueue_baseline_e2e``), and while it runs in the cycle worker every finish waits for it
before its quota is handed on. So when a **forecaster** runs -- a Celery worker of its
own on ``KQ_FORECAST_QUEUE`` (``manage.py run_all``'s ``forecaster``,
``deploy/forecaster.yaml``) -- a cycle that is due to forecast asks it instead
(``request``) and only admits. The forecaster keeps worlds of its own (queueing.world),
fed by the same journal, reads the node view the cycles persist (queueing.nodeview),
runs the engine's cycle with its forecast on the whole tree and writes only what the
waiting show: it never admits, preempts or charges anything, and its statement is
guarded by phase like the cycle's, so a workload admitted meanwhile keeps what the
cycle wrote. Without a forecaster (tests, the simulator, a deployment without it, a
forecaster that died) the cycles forecast themselves, as before.

- **Liveness.** A forecaster says it is there every ``HEARTBEAT_EVERY_S`` from a thread of
  its own (``start_heartbeat``, from the worker's start); cycles delegate while that
  note is younger than ``HEARTBEAT_TTL_S`` (``serving``, read at most once a second per
  process). A forecaster that dies is missed within that TTL, and the cycles forecast
  themselves again.
- **One request per tree on its way.** ``request`` sets a key per tree (``add``: only if
  absent) and sends ``queueing.forecast`` only if it set it; the task drops the key as it
  starts, so a request made while it runs sends another. A request lost with a killed
  forecaster is sent again once its key expires (``REQUEST_TTL_S``).
- **One writer's memory.** What a world remembers of the rows it annotated
  (``world.Shown``, and the annotation fields of its rows) is right only while nobody
  else annotates them: the forecaster's writes are not journaled (the cycles' worlds
  would re-read thousands of rows a second for fields they never read). Every annotating
  world therefore notes itself as the tree's last writer after its commit (``wrote``);
  a world that annotates after another did is rebuilt first (``take_over``), whether it
  is the forecaster's after a cycle's inline forecast or the cycle's after the
  forecaster's.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from queueing import lease as leases
from queueing import trace, wake, world

log = logging.getLogger(__name__)

#: A forecaster renews its note this often, and the note lasts this long.
HEARTBEAT_EVERY_S = 2.0
HEARTBEAT_TTL_S = 6.0
HEARTBEAT_KEY = "kq:forecaster:alive"
#: A request's key (one ``queueing.forecast`` on its way per tree) outlives a lost task
#: only this long.
REQUEST_TTL_S = 5
#: How long a forecast may hold its tree's forecast lease.
LEASE_TTL_S = 30.0
#: ``serving`` reads the note at most this often per process.
LOOK_EVERY_S = 1.0


def request_key(root: str) -> str:
    return f"kq:forecast:{root}"


def writer_key(root: str) -> str:
    return f"kq:forecast:writer:{root}"


# --- liveness ------------------------------------------------------------------------

_looked: tuple[float, bool] | None = None
_look_lock = threading.Lock()
#: When this process last saw a forecaster (monotonic), for ``lately``.
_seen_at = float("-inf")


def serving() -> bool:
    """Whether a forecaster is there to take this process's forecasts (read at most once
    per ``LOOK_EVERY_S``). False when wakes are off (no broker to send requests on)."""
    global _looked, _seen_at
    if not settings.KQ_FORECAST_QUEUE or not wake.enabled():
        return False
    now = time.monotonic()
    looked = _looked
    if looked is not None and now - looked[0] < LOOK_EVERY_S:
        return looked[1]
    try:
        alive = wake.cache.get(HEARTBEAT_KEY) is not None
    except Exception:  # the cache is down: forecast here
        alive = False
    with _look_lock:
        _looked = (now, alive)
        if alive:
            _seen_at = now
    return alive


#: How long after it last saw a forecaster a process keeps its annotations' writer noted.
LATELY_S = 60.0


def lately() -> bool:
    """Whether this process saw a forecaster within ``LATELY_S``: only then does a cycle
    that forecasts itself look at and note the tree's last writer (``take_over``,
    ``wrote``; two cache round trips). A process that has not seen one for that long
    wrote every annotation since the forecaster's last, and a forecaster that comes (or
    comes back) finds the note naming another world and reads its rows anew."""
    return time.monotonic() - _seen_at < LATELY_S


def look_again() -> None:
    """The next ``serving`` reads the forecaster's note (tests; a cache flush)."""
    global _looked
    with _look_lock:
        _looked = None


def forget() -> None:
    """Tests: forget the last look at the forecaster's note, and having seen one."""
    global _looked, _seen_at
    with _look_lock:
        _looked = None
        _seen_at = float("-inf")


def beat() -> None:
    """Note that a forecaster is there, for ``HEARTBEAT_TTL_S``."""
    wake.cache.set(HEARTBEAT_KEY, time.time(), timeout=HEARTBEAT_TTL_S)


def stop_beating() -> None:
    """A forecaster that stops cleanly: the cycles forecast themselves at once."""
    try:
        wake.cache.delete(HEARTBEAT_KEY)
    except Exception:
        log.debug("could not drop the forecaster's note", exc_info=True)


_heartbeat: threading.Thread | None = None
_heartbeat_stop = threading.Event()


def start_heartbeat(queues: list[str] | None) -> bool:
    """From a worker's start: if it consumes the forecast queue, a daemon thread notes
    every ``HEARTBEAT_EVERY_S`` that it is there. Whether it started one."""
    global _heartbeat
    if not settings.KQ_FORECAST_QUEUE or (
        queues is not None and settings.KQ_FORECAST_QUEUE not in set(queues)
    ):
        return False
    if _heartbeat is not None and _heartbeat.is_alive():
        return True
    _heartbeat_stop.clear()
    try:
        beat()  # there from the moment the worker is ready, not a thread's start later
    except Exception:
        log.warning("the forecaster could not note it is there", exc_info=True)

    def run() -> None:
        while not _heartbeat_stop.wait(HEARTBEAT_EVERY_S):
            try:
                beat()
            except Exception:
                log.warning("the forecaster could not note it is there", exc_info=True)
        stop_beating()

    _heartbeat = threading.Thread(target=run, name="kq-forecaster-heartbeat", daemon=True)
    _heartbeat.start()
    return True


def stop_heartbeat() -> None:
    global _heartbeat
    _heartbeat_stop.set()
    if _heartbeat is not None:
        _heartbeat.join(timeout=5)
    _heartbeat = None


# --- requests ------------------------------------------------------------------------


def send(root: str) -> None:
    from queueing.tasks import forecast

    forecast.apply_async(
        args=[root],
        queue=settings.KQ_FORECAST_QUEUE,
        # A request nobody took in time is overtaken by the cycles' next one.
        expires=REQUEST_TTL_S,
    )


def request(root: str, *, after_commit: bool = False) -> bool:
    """Ask the forecaster for ``root``'s forecast, unless a request is on its way.
    Whether one was sent (or, ``after_commit`` inside a transaction, will be once it
    commits: a caller's transaction, the forecaster must see what it wrote)."""
    if after_commit and transaction.get_connection().in_atomic_block:
        transaction.on_commit(lambda: request(root))
        return True
    try:
        if not wake.cache.add(request_key(root), time.time(), timeout=REQUEST_TTL_S):
            return False
        send(root)
    except Exception:
        log.warning("could not ask the forecaster for %s", root, exc_info=True)
        return False
    trace.mark("forecast_request", root=root)
    return True


# --- one writer's memory -------------------------------------------------------------


def take_over(tree: world.TreeWorld | None) -> None:
    """Before ``tree`` is annotated: if another world wrote the tree's annotations last,
    what this one remembers of them is stale -- rebuild it at its refresh."""
    if tree is None:
        return
    try:
        last = wake.cache.get(writer_key(tree.root))
    except Exception:
        tree.invalidate()  # cannot tell: read the rows again
        return
    if last is not None and last != tree.token:
        tree.invalidate()


def wrote(tree: world.TreeWorld | None) -> None:
    """``tree``'s process writes annotations (see ``take_over``): noted now and again
    once they commit, so that of two writers racing the one that committed last is
    named. A write that rolls back leaves the note naming it: the other world then
    reads its rows anew, which is only wasted, and the failed one was invalidated."""
    if tree is None:
        return
    token, root = tree.token, tree.root

    def note() -> None:
        try:
            wake.cache.set(writer_key(root), token, timeout=None)
        except Exception:
            log.warning("could not note the annotations' writer of %s", root, exc_info=True)

    note()
    if transaction.get_connection().in_atomic_block:
        transaction.on_commit(note)


# --- the forecaster's work -----------------------------------------------------------


def forecast_tree(root: str, *, now: datetime | None = None) -> dict[str, Any]:
    """Forecast ``root`` and write what its waiting workloads show. Nothing else is
    written: no phase, quota, ledger or cycle record (see the module docstring).
    ``now``: the time the forecast is made at (tests' clocks; else the wall clock)."""
    from queueing import events, nodeview, state
    from queueing.engine import run_cycle as engine_cycle
    from queueing.state import batch
    from queueing.state.annotate import annotations_statement, located, pending_annotations

    if not state.forecast_due(root):
        # Within this process's share of the time (state.forecast_due), as a cycle's.
        return {"root": root, "skipped": True}
    started = time.perf_counter()
    held = leases.acquire(f"forecast:{root}", ttl_s=LEASE_TTL_S)
    if held is None:
        return {"root": root, "skipped": True}
    tree: world.TreeWorld | None = None
    try:
        tree = world.world_of(root) if world.enabled() else None
        take_over(tree)
        quotas = state.read_quotas(root)
        quota_ids = state.tree_quota_ids(root, quotas)
        if not quota_ids:
            return {"root": root, "skipped": True}
        if tree is not None:
            tree.refresh(quota_ids)
        nodes = nodeview.read()
        # Every waiting workload while that is cheap, else the heads of the queues and
        # what is new, as a forecasting cycle would (state.full_cycle_due).
        full = state.full_cycle_due(root)
        snapshot, index = state.build_snapshot(
            root,
            nodes=nodes,
            now=now,
            head=None if full else state.HEAD_ROWS,
            world=tree,
            forecast=True,
            quotas=quotas,
            config=state.engine_config(forecaster=True),
        )
        engine_started = time.perf_counter()
        result = engine_cycle(snapshot, forecast=True)
        engine_ms = (time.perf_counter() - engine_started) * 1000
        with transaction.atomic():
            # Still ours, or another forecaster took over: write nothing. Annotations
            # are redone by the next forecast: the commit need not wait for the disk.
            leases.check(held, defer_flush=leases.can_defer_flush())
            annotated = pending_annotations(result, index, full=full)
            statement = annotations_statement(annotated, index.now)
            if statement is not None:
                batch.run([statement])
            # The live stream hears of them; no world is journaled, no cycle woken: the
            # world that wrote them takes them in place.
            events.notify_changes(located(annotated, index), own_world=True)
            world.record_cycle(root, (), annotated, tree, journal=False)
            wrote(tree)
        elapsed = time.perf_counter() - started
        state.forecast_done(root, elapsed)
        if full:
            state.full_cycle_done(root, elapsed)
        ms = elapsed * 1000
        trace.mark(
            "forecast",
            root=root,
            full=full,
            engine_ms=round(engine_ms, 1),
            annotated=len(annotated),
            ms=round(ms, 1),
        )
        return {"root": root, "annotated": len(annotated), "ms": round(ms, 1)}
    except leases.LeaseLost as exc:
        if tree is not None:
            tree.invalidate()
        log.warning("forecast of %s dropped: %s", root, exc)
        return {"root": root, "skipped": True}
    except BaseException:
        if tree is not None:
            tree.invalidate()
        raise
    finally:
        leases.release(held)
