"""Cycles woken by events instead of beat's timer (docs/realtime.md).

Whatever can change a decision wakes the cycle of the quota tree it touches:

- the product's own changes, once their transaction commits: a submission, a
  cancellation, a phase the sync moved (a job finished, vanished, was evicted; a new
  Job registered; not a job that merely started) — ``events.notify_changes``; a
  quota or a queue saved or deleted — the model signals below;
- the cluster: in Kubernetes mode ``watch_cluster`` turns watch events into
  ``wake(None, sync=True)``; the simulated cluster says when its next job will finish
  (``Timed``) and the cycle worker sets a timer for it. A woken sync collects the
  wakes of its own changes (``collecting``) and sends one react per tree it touched.

A wake is debounced: the first one for a tree sends a ``queueing.react`` task on the
cycle queue (``KQ_CYCLE_QUEUE``) to run ``KQ_WAKE_DEBOUNCE_MS`` later, and every wake
until that task starts rides along with it (a cache key marks the task as on its way;
the task drops the key as it starts, so a change made while it runs wakes it again).
Nothing here is needed for correctness: beat's tick still reconciles what woken tasks
did not cover (``covered``), so a lost wake costs latency, never a decision.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.db import transaction
from django.utils import timezone

from queueing import trace

log = logging.getLogger(__name__)

ALL = "*"  # every tree
SYNC = "sync"  # a look at the cluster, which then wakes the trees it touched
# A wake key outlives a task that was lost (a killed worker, an expired message) only
# this long; then wakes send tasks again.
KEY_TTL_S = 5
TIMER_KEY = "kq:wake:timer"
# Timers fire this much after the instant they wait for, so the change is there to see.
TIMER_SLACK_S = 0.005

Sender = Callable[[str, float], None]

_local = threading.local()


class _ProcessCache:
    """The default cache, one client for every thread of the process.

    Django keeps a cache object per thread, and its Redis client a connection pool per
    object: a wake from a short-lived thread (the informers' coalescing timer, a new
    thread at every burst of watch events) connected to Redis anew each time (a TCP
    connect and the client's handshake) and left the pool to the garbage collector.
    redis-py's client and pool are thread-safe; Django's locmem cache shares its store
    by name. Made again after a fork or when the CACHES setting changes (tests)."""

    def __init__(self) -> None:
        self._made: tuple[int, Any, Any] | None = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        made = self._made
        config = settings.CACHES
        if made is None or made[0] != os.getpid() or made[1] is not config:
            with self._lock:
                made = self._made
                if made is None or made[0] != os.getpid() or made[1] is not config:
                    made = (os.getpid(), config, caches.create_connection(DEFAULT_CACHE_ALIAS))
                    self._made = made
        return made[2]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)


cache: Any = _ProcessCache()


def enabled() -> bool:
    return bool(settings.KQ_WAKE)


def key(target: str) -> str:
    return f"kq:wake:{target}"


def send_react(target: str, countdown_s: float, stamp: float | None = None) -> None:
    """Queue the ``react`` task for ``target`` (a root, ALL or SYNC). ``stamp``: the value
    of the wake key it was sent for (``claim``)."""
    from queueing.tasks import react

    react.apply_async(
        args=[target],
        kwargs={"stamp": stamp} if stamp is not None else None,
        # No countdown at all for a wake due now: a message with an ETA waits in the
        # worker's timer, one without goes straight to its pool.
        countdown=countdown_s if countdown_s > 0 else None,
        queue=settings.KQ_CYCLE_QUEUE,
        # A react nobody picked up within a tick or two is overtaken by beat's tick.
        expires=countdown_s + max(settings.KQ_CYCLE_INTERVAL_S * 2, 5.0),
    )


_sender: Callable[..., None] = send_react
#: Whether the sender passes each react the stamp of its wake key (``claim``, ``take``).
_stamped = True


def set_sender(sender: Sender | Callable[..., None] | None) -> None:
    """Tests replace how a react is sent (None: the Celery task again). A sender with a
    ``stamp`` parameter gets each react's stamp, as the Celery task does."""
    global _sender, _stamped
    _sender = sender if sender is not None else send_react
    try:
        _stamped = "stamp" in inspect.signature(_sender).parameters
    except (TypeError, ValueError):
        _stamped = False


def _send(target: str, countdown_s: float, stamp: float) -> None:
    if _stamped:
        _sender(target, countdown_s, stamp=stamp)
    else:
        _sender(target, countdown_s)


@contextlib.contextmanager
def suppressed() -> Iterator[None]:
    """Inside, wakes are dropped: the caller cycles everything it changes itself (beat's
    tick: its sync would otherwise wake the trees it is about to cycle)."""
    before = getattr(_local, "suppressed", False)
    _local.suppressed = True
    try:
        yield
    finally:
        _local.suppressed = before


@contextlib.contextmanager
def collecting() -> Iterator[set[str]]:
    """Inside, wakes are collected instead of sent: the set yielded gets each tree woken
    (``ALL`` for every tree; never ``SYNC``). A woken sync runs inside it, then wakes
    exactly the trees its transitions and registrations touched (``react``)."""
    before = getattr(_local, "collected", None)
    touched: set[str] = set()
    _local.collected = touched
    try:
        yield touched
    finally:
        _local.collected = before


def wake(
    roots: Iterable[str] | None,
    *,
    sync: bool = False,
    reason: str = "",
    delay_s: float | None = None,
    fresh: bool = False,
) -> int:
    """Wake the cycle of each of ``roots`` (None: every tree, ``ALL``); ``sync`` wakes a
    sync instead, which then wakes the trees it touches. ``delay_s`` replaces the
    debounce (a retry after a busy lease, a wake already debounced). ``fresh``: send even
    if a react seems on its way (its key may be a lost task's: a worker's start, a
    fan-out). Returns how many tasks were sent."""
    if not enabled() or getattr(_local, "suppressed", False):
        return 0
    targets = [SYNC] if sync else ([ALL] if roots is None else sorted(set(roots)))
    collected: set[str] | None = getattr(_local, "collected", None)
    if collected is not None:
        collected.update(target for target in targets if target != SYNC)
        return 0
    sent = 0
    debounce = settings.KQ_WAKE_DEBOUNCE_MS / 1000 if delay_s is None else delay_s
    for target in targets:
        try:
            # The key holds when it was set: beat's tick trusts a react on its way only
            # for an interval (``covered``), a lost one's key lives KEY_TTL_S. The same
            # value is the react's stamp (``claim``).
            stamp = time.time()
            if fresh:
                cache.set(key(target), stamp, timeout=KEY_TTL_S)
            elif not cache.add(key(target), stamp, timeout=KEY_TTL_S):
                trace.mark("wake_rides", target=target, reason=reason)
                continue  # a react is on its way and will see this change
            _send(target, debounce, stamp)
            trace.mark("wake", target=target, reason=reason, delay_ms=round(debounce * 1000))
            sent += 1
        except Exception:  # the broker or the cache is down: beat's tick still runs
            log.exception("could not wake the cycle of %s", target)
    return sent


def wake_on_commit(roots: Iterable[str] | None, *, reason: str = "") -> None:
    chosen = None if roots is None else list(roots)
    transaction.on_commit(lambda: wake(chosen, reason=reason))


def wake_now(roots: Iterable[str], *, reason: str = "") -> int:
    """Wake ``roots`` with no debounce: what woke them was debounced already (a sync's
    transitions, a fan-out of every tree)."""
    return wake(roots, reason=reason, delay_s=0.0)


# --- what woken tasks did or will do, so beat's tick does not do it again ----------------

WOKEN_SYNC = "sync"
# A tree that nothing changed in is still cycled by the tick this many intervals after
# its last cycle: time alone moves some decisions (a backoff ending, an admission
# timeout, aging, the forecast's ETAs).
UNCHANGED_TICKS = 2


def done_key(what: str) -> str:
    return f"kq:woken-done:{what}"


def cycled_key(root: str) -> str:
    return f"kq:cycled:{root}"


def woken_done(what: str) -> None:
    """A woken task just ran the sync (``WOKEN_SYNC``)."""
    try:
        cache.set(done_key(what), time.time(), timeout=KEY_TTL_S + 60)
    except Exception:
        log.exception("could not note that %s ran", what)


def cycled(root: str, head: str | None, *, node_bound: bool | None = None) -> None:
    """A cycle of ``root`` (woken or beat's) succeeded, having read after ``head``.
    ``node_bound``: whether it left work waiting for room on the nodes
    (``note_node_bound``), noted in the same round trip."""
    if not enabled():
        return
    values: dict[str, Any] = {cycled_key(root): [time.time(), head]}
    if node_bound is not None:
        values[node_bound_key(root)] = int(node_bound)
    try:
        # Both keys live NODE_BOUND_TTL_S: a tree not cycled for that long is cycled by
        # the tick anyway (``covered``: UNCHANGED_TICKS intervals at most).
        cache.set_many(values, timeout=NODE_BOUND_TTL_S)
    except Exception:
        log.exception("could not note the cycle of %s", root)


def cycled_many(notes: Iterable[tuple[str, str | None, bool | None, float]]) -> None:
    """``cycled`` of each tree of a pass, in one round trip at its end: (root, head,
    node_bound, when its cycle succeeded -- ``time.time()``, as ``cycled`` notes it)."""
    if not enabled():
        return
    values: dict[str, Any] = {}
    for root, head, bound, at in notes:
        values[cycled_key(root)] = [at, head]
        if bound is not None:
            values[node_bound_key(root)] = int(bound)
    if not values:
        return
    try:
        cache.set_many(values, timeout=NODE_BOUND_TTL_S)
    except Exception:
        log.exception("could not note the cycles of %s", ", ".join(n[0] for n in notes))


def covered(whats: Iterable[str], seconds: float) -> set[str]:
    """Those of ``whats`` (``WOKEN_SYNC``, roots) that beat's tick (every ``seconds``)
    leaves to woken tasks. Empty with wakes off: then only ticks sync and cycle.

    - the sync: a woken one ran less than an interval ago, or one was woken less than
      an interval ago and has not started;
    - a tree: a react of it was woken less than an interval ago and has not started
      (``ALL``'s covers every tree); or nothing but cycles' own writes reached its
      journal since its last cycle began, and that cycle is less than
      ``UNCHANGED_TICKS`` intervals old (with worlds off, which keep no journal: its
      last cycle is less than an interval old).

    So a tick does what a lost wake left undone (a react still waiting after an interval
    is lost or stuck behind a backlog: the tick does its work) within two intervals,
    and what time alone changes within ``UNCHANGED_TICKS``."""
    from queueing import world

    wanted = list(whats)
    if not wanted or not enabled() or seconds <= 0:
        return set()
    roots = [what for what in wanted if what != WOKEN_SYNC]
    keys = [key(ALL), key(SYNC), done_key(WOKEN_SYNC)]
    keys += [key(root) for root in roots] + [cycled_key(root) for root in roots]
    try:
        found = cache.get_many(keys)
    except Exception:
        log.exception("could not read what woken tasks ran")
        return set()
    now = time.time()

    def recent(name: str) -> bool:
        try:
            return float(found.get(name, 0.0)) > now - seconds
        except (TypeError, ValueError):  # a key of an older version: not trusted
            return False

    out: set[str] = set()
    if WOKEN_SYNC in wanted and (recent(key(SYNC)) or recent(done_key(WOKEN_SYNC))):
        out.add(WOKEN_SYNC)
    journaled = world.enabled()
    for root in roots:
        if recent(key(ALL)) or recent(key(root)):
            out.add(root)
            continue
        at, head = found.get(cycled_key(root)) or (0.0, None)
        if not journaled:
            if float(at) > now - seconds:
                out.add(root)
            continue
        if head is None or float(at) <= now - seconds * UNCHANGED_TICKS:
            continue
        try:
            if not world.journal().changed_since(root, str(head)):
                out.add(root)
        except Exception:
            log.exception("could not read the journal of %s", root)
    return out


# --- beat's tick as a dispatcher: whether the cycle queue is being served ------------------

DISPATCHED_KEY = "kq:tick:dispatched"
# A tick's wakes are trusted to be served while the oldest of them no react has served
# yet is younger than this many intervals; past that the cycle queue is taken as
# unserved (no cycle worker, or one stuck) and the tick does the work itself.
SERVED_TICKS = 2


def react_started() -> None:
    """A react starts: the cycle queue is being served, whatever ticks asked is due."""
    try:
        cache.delete(DISPATCHED_KEY)
    except Exception:
        log.exception("could not note that a react started")


def dispatched() -> None:
    """Beat's tick just sent (or rode on) wakes, and expects a react to start. Only the
    first such tick since the last react is noted: a tick that asks again, riding on
    the wakes still waiting, is not served by asking."""
    try:
        cache.add(DISPATCHED_KEY, time.time(), timeout=3600)
    except Exception:
        log.exception("could not note the tick's dispatch")


def reacts_served(seconds: float) -> bool:
    """Whether beat's tick (every ``seconds``) may leave its work to reacts: no wake it
    asked for has waited ``SERVED_TICKS`` intervals without a react starting. False
    sends the tick back to doing the work in its own process (a cycle worker down or
    stuck: the safety net must not depend on it); the first react to start again
    restores the dispatch."""
    if not enabled():
        return False
    try:
        sent = cache.get(DISPATCHED_KEY)
    except Exception:
        log.exception("could not read whether the cycle queue is served")
        return False
    if sent is None:
        return True
    try:
        return float(sent) > time.time() - seconds * SERVED_TICKS
    except (TypeError, ValueError):  # a key of an older version: not trusted
        return False


TICK_KEY = "kq:tick:ran"


def tick_due(seconds: float) -> bool:
    """Whether a tick of beat (every ``seconds``) that starts now has work to do: False
    when another started less than half an interval ago. Beat sends one per interval;
    two that close were queued behind a long task and the first just did what both
    would (a woken sync's pass keeps the worker for up to an interval: two or three
    ticks waited behind it, and ran back to back for 50-280 ms each at load 11)."""
    now = time.time()
    timeout = max(1, math.ceil(seconds))
    try:
        if cache.add(TICK_KEY, now, timeout=timeout):
            return True
        last = cache.get(TICK_KEY)
        if last is not None and now - float(last) < seconds / 2:
            return False
        cache.set(TICK_KEY, now, timeout=timeout)
    except (TypeError, ValueError):  # a key of an older version: run
        return True
    except Exception:  # the cache is down: the tick runs, as the safety net must
        log.exception("could not note beat's tick")
    return True


# --- trees waiting for room on the nodes, not for quota ------------------------------------

NODE_BOUND_TTL_S = 600


def node_bound_key(root: str) -> str:
    return f"kq:nodebound:{root}"


def note_node_bound(root: str, bound: bool) -> None:
    """After a tree's cycle: whether some of its waiting wait for room on the nodes (their
    quota would let them in). Room freed by any tree's finish may let those in, so every
    sync that moved something wakes such a tree too (``node_bound``); a tree waiting for
    quota only is woken by its own changes."""
    try:
        cache.set(node_bound_key(root), int(bound), timeout=NODE_BOUND_TTL_S)
    except Exception:  # the cache is down: beat's tick still cycles every tree
        log.exception("could not note whether %s waits for node room", root)


def node_bound(roots: Iterable[str]) -> set[str]:
    """Those of ``roots`` whose last cycle left work waiting for room on the nodes."""
    wanted = list(roots)
    if not wanted:
        return set()
    try:
        found = cache.get_many([node_bound_key(root) for root in wanted])
    except Exception:
        log.exception("could not read which trees wait for node room")
        return set(wanted)  # when in doubt, wake them: a wake too many costs a cycle
    return {root for root in wanted if found.get(node_bound_key(root))}


def lookout(roots: Iterable[str]) -> tuple[dict[str, Any], set[str]]:
    """``(on_its_way(roots), node_bound(roots))`` in one round trip (a woken sync's); the
    trees on their way with their keys' values (the stamps of their reacts: ``take``)."""
    wanted = list(roots)
    if not wanted:
        return {}, set()
    try:
        found = cache.get_many([key(r) for r in wanted] + [node_bound_key(r) for r in wanted])
    except Exception:
        log.exception("could not read which trees are woken or wait for node room")
        # As on_its_way and node_bound say in doubt (no stamps: none is taken).
        return dict.fromkeys(wanted), set(wanted)
    return (
        {root: found[key(root)] for root in wanted if key(root) in found},
        {root for root in wanted if found.get(node_bound_key(root))},
    )


def on_worker_start(queues: Iterable[str] | None) -> int:
    """A worker that consumes the cycle queue starts (or restarts after a crash): whatever
    its predecessor had received and not finished is gone with it -- a react is
    acknowledged as it starts, not kept for redelivery (portal.celery) -- so wake a sync
    and every tree afresh, past any key a lost task left. Beat's tick would get there
    too, a tick or two later."""
    if not enabled() or (queues is not None and settings.KQ_CYCLE_QUEUE not in set(queues)):
        return 0
    return wake(None, sync=True, reason="worker start", fresh=True) + wake(
        None, reason="worker start", fresh=True
    )


# A target whose lease is busy is woken again after BUSY_RETRY_S, doubled at each busy
# retry in a row up to BUSY_RETRY_MAX_S: a holder cycling now releases within a cycle,
# a killed holder's lease only at its TTL (KQ_CYCLE_LEASE_S), which a retry every 100 ms
# would wait out as hundreds of tasks.
BUSY_RETRY_S = 0.1
BUSY_RETRY_MAX_S = 2.0


def busy_key(target: str) -> str:
    return f"kq:busy:{target}"


def wake_busy(targets: Iterable[str], *, reason: str = "lease busy") -> int:
    """Wake ``targets`` (roots, or ``SYNC``) again: their lease was held by another."""
    sent = 0
    for target in targets:
        try:
            streak = int(cache.get(busy_key(target)) or 0)
            cache.set(busy_key(target), streak + 1, timeout=int(BUSY_RETRY_MAX_S * 10))
        except Exception:
            streak = 0
        delay = min(BUSY_RETRY_S * 2**streak, BUSY_RETRY_MAX_S)
        if target == SYNC:
            sent += wake(None, sync=True, reason=reason, delay_s=delay)
        else:
            sent += wake([target], reason=reason, delay_s=delay)
    return sent


def not_busy(*targets: str) -> None:
    """``targets`` got their lease: the next busy retry starts short again (one round
    trip for all of them)."""
    if not targets:
        return
    try:
        cache.delete_many([busy_key(target) for target in targets])
    except Exception:
        log.exception("could not reset the busy retries of %s", ", ".join(targets))


def on_its_way(targets: Iterable[str]) -> set[str]:
    """Those of ``targets`` with a react on its way (its key is set): a caller about to
    run one's work in place of a react leaves those to their react, which will see the
    change. A wake made while the caller runs sends a react, as it would during one."""
    wanted = list(targets)
    if not wanted:
        return set()
    try:
        found = cache.get_many([key(target) for target in wanted])
    except Exception:
        log.exception("could not read which reacts are on their way")
        return set(wanted)
    return {target for target in wanted if key(target) in found}


def taken(target: str) -> None:
    """A react for ``target`` starts: wakes from now on need a react of their own."""
    cache.delete(key(target))


# --- a react's work done by another task: its stamp taken --------------------------------
#
# A woken sync cycles the trees it touched in its own task, and runs again while a wake of
# the sync came meanwhile (admission.react): on a worker that serves the cycle queue alone,
# their reacts would run after every task queued before them (beat's ticks, other trees),
# and the quota a finish freed would wait for all of those. Such a task *takes* the wakes
# it serves: it drops their keys (wakes from then on send a react of their own) and notes
# the stamp each key held; the react sent with that stamp finds it taken when it starts
# (``claim``) and does nothing, its work done. Stamps are compared for equality, never
# as times: clocks of several machines may differ.
TAKEN_TTL_S = 300  # longer than a react can wait before it expires (send_react)


def taken_key(target: str) -> str:
    return f"kq:wake-taken:{target}"


def stamps_taken() -> bool:
    """Whether a woken sync's pass takes the wakes it serves (``KQ_SYNC_PASS_TAKES``) and
    reacts carry their stamps (the Celery task does): only then is a react's work taken
    over by another task; otherwise the react would run it again."""
    return _stamped and bool(settings.KQ_SYNC_PASS_TAKES)


def take(stamps: dict[str, Any]) -> None:
    """The wakes of ``stamps`` (target -> its key's value, as read) are served by the
    caller, which does their work next: their keys are dropped (two round trips)."""
    chosen = {target: stamp for target, stamp in stamps.items() if isinstance(stamp, float)}
    if not chosen:
        return
    try:
        cache.set_many(
            {taken_key(target): stamp for target, stamp in chosen.items()}, timeout=TAKEN_TTL_S
        )
        cache.delete_many([key(target) for target in chosen])
    except Exception:  # its react runs the work again: a cycle too many, never too few
        log.exception("could not take the wakes of %s", ", ".join(chosen))


def pending(target: str) -> Any:
    """The value of ``target``'s wake key (a react on its way, and its stamp), or None."""
    try:
        return cache.get(key(target))
    except Exception:
        log.exception("could not read whether %s is woken", target)
        return None


def claim(target: str, stamp: float | None) -> bool:
    """A react for ``target`` starts: False if the wake it was sent for (``stamp``) was
    taken by a task that did its work (``take``); else ``started``. The cycle queue is
    served either way. Without a stamp (a timer, an older sender), always True."""
    if stamp is None or not settings.KQ_SYNC_PASS_TAKES:
        started(target)
        return True
    try:
        found = cache.get(taken_key(target))
    except Exception:
        log.exception("could not read whether the wake of %s was taken", target)
        found = None
    if found is not None and found == stamp:
        react_started()
        return False
    started(target)
    return True


def started(target: str) -> None:
    """A react for ``target`` starts: ``taken`` and ``react_started`` in one round trip."""
    try:
        cache.delete_many([key(target), DISPATCHED_KEY])
    except Exception:
        log.exception("could not note that a react of %s started", target)


# --- which trees a change touches ----------------------------------------------------


def roots_of_quotas(quota_ids: Iterable[int]) -> set[str]:
    """The root names of the trees holding ``quota_ids`` (one small query of the tree)."""
    return set(root_of_each(quota_ids).values())


def root_of_each(quota_ids: Iterable[int]) -> dict[int, str]:
    """quota id -> the name of its tree's root (quotas no longer there are left out)."""
    from queueing.models import Quota

    wanted = set(quota_ids)
    if not wanted:
        return {}
    parents: dict[int, tuple[int | None, str]] = {
        qid: (parent, name)
        for qid, parent, name in Quota.objects.values_list("id", "parent_id", "name")
    }
    found: dict[int, str] = {}
    for quota_id in wanted:
        current: int | None = quota_id
        seen: set[int] = set()
        while current is not None and current in parents and current not in seen:
            seen.add(current)
            parent, name = parents[current]
            if parent is None:
                found[quota_id] = name
            current = parent
    return found


# --- timers: the simulated cluster's jobs finish at known instants ------------------------


def arm_timer(at: datetime | None, *, now: datetime | None = None) -> bool:
    """Wake a sync at ``at`` (when the next job finishes), unless an earlier timer is set.
    Returns whether a task was sent."""
    if at is None or not enabled():
        return False
    now = now or timezone.now()
    due = at.timestamp() + TIMER_SLACK_S
    armed = cache.get(TIMER_KEY)
    if armed is not None and float(armed) <= due + 0.001 and float(armed) > time.time():
        return False
    cache.set(TIMER_KEY, due, timeout=max(1, int(due - now.timestamp()) + KEY_TTL_S))
    try:
        _sender(SYNC, max(0.0, due - now.timestamp()))
    except Exception:
        log.exception("could not set the cycle's timer")
        return False
    return True


# --- quota and queue edits ------------------------------------------------------------


def _audited(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    """Every quota and queue edit is audited (queueing.actions.audit), whatever way it
    writes the row: the audit record is where it is heard."""
    if not created or not enabled() or instance.object_type not in ("quota", "queue"):
        return
    if instance.object_type == "queue":
        # A queue may serve quotas of several trees: wake them all.
        wake_on_commit(None, reason="queue")
        return
    quota_id = int(instance.object_id) if str(instance.object_id).isdigit() else None
    parent_id = (instance.before or {}).get("parent_id") or (instance.after or {}).get("parent_id")

    def later() -> None:
        ids = [q for q in (quota_id, parent_id) if isinstance(q, int)]
        # A deleted quota is no longer in the tree; nor is a root just made: wake all.
        wake(roots_of_quotas(ids) or None, reason="quota")

    transaction.on_commit(later)


def connect_signals() -> None:
    from django.db.models.signals import post_save

    from queueing.models import AuditEvent

    post_save.connect(_audited, sender=AuditEvent, dispatch_uid="kq-wake-audit")
