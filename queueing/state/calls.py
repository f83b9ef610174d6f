"""The one loop for cluster calls made after a commit, shared by the cycle and the sync.

No transaction stays open across a cluster round trip: the database writes commit
first, then the cluster is made to follow. Every call is idempotent; what one misses,
the next sync repeats. The fence is checked before each round: a round takes at most
one call's time, which is what the fence's margin covers, so a worker that lost its
lease stops before it unsuspends a job another worker has decided about since.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from queueing import faults
from queueing.cluster.base import Cluster, ClusterError, JobNotFound, JobRef
from queueing.lease import Fence, LeaseLost

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Call:
    """One cluster write: ``verb`` is "admit" or "suspend"."""

    verb: str
    ref: JobRef
    node_selector: Mapping[str, str] = field(default_factory=dict)
    #: Runs (in the calling thread's round) when the write succeeded.
    done: Callable[[], None] | None = None
    #: A vanished job is no error (the next sync cancels its workload).
    missing_ok: bool = False
    #: The caller's name for the call (the sync counts successes under it).
    label: str = ""

    @property
    def what(self) -> str:
        return f"{self.ref.namespace}/{self.ref.name}"


def admit_call(
    ref: JobRef, pool: str, pool_label: str, *, done: Callable[[], None] | None = None
) -> Call:
    return Call("admit", ref, {pool_label: pool} if pool else {}, done=done)


def run_calls(
    cluster: Cluster,
    calls: Sequence[Call],
    fence: Fence,
    errors: list[str],
    *,
    raise_lost: bool = False,
) -> int:
    """Make the calls, ``write_concurrency`` of the cluster at a time (an API server takes
    concurrent writes; the simulated cluster writes its own rows, one at a time). Failures
    go to ``errors``; returns how many succeeded. Stops when the lease behind ``fence`` is
    lost: with an error, or by raising LeaseLost (``raise_lost``)."""
    width = max(1, int(getattr(cluster, "write_concurrency", 1) or 1))
    pool = _writers(width) if width > 1 and len(calls) > 1 else None
    succeeded = 0
    for start in range(0, len(calls), width):
        try:
            fence.check()
        except LeaseLost as exc:
            if raise_lost:
                raise
            errors.append(str(exc))
            return succeeded
        round_ = calls[start : start + width]
        outcomes = _round(pool, cluster, round_)
        for call, error in zip(round_, outcomes, strict=True):
            if error is None:
                succeeded += 1
                if call.done is not None:
                    call.done()
            elif error:
                errors.append(error)
    return succeeded


def _round(
    pool: ThreadPoolExecutor | None, cluster: Cluster, round_: Sequence[Call]
) -> list[str | None]:
    """One round's calls at once: the first in the caller's thread, the others in the
    pool (a round of one makes no thread hop at all)."""
    if pool is None or len(round_) == 1:
        return [_call(cluster, call) for call in round_]
    try:
        futures = [pool.submit(_pooled_call, cluster, call) for call in round_[1:]]
    except RuntimeError:  # the interpreter is shutting down: no new threads
        return [_call(cluster, call) for call in round_]
    first = _call(cluster, round_[0])
    return [first, *(future.result() for future in futures)]


# The rounds' calls go to one pool per process, kept: a pool made per batch started a
# thread per call (about as much CPU as the call itself, with the thread's first use of
# Django's per-thread connections). Its width covers every caller at once -- the sync's
# repairs and BACKGROUND_WIDTH trees' calls, each ``write_concurrency`` wide; threads
# start only when a call finds none idle.
_writer_pool: ThreadPoolExecutor | None = None
_writer_key: tuple[int, int] = (0, 0)  # (pid, size) of _writer_pool
_writer_lock = threading.Lock()


def _writers(width: int) -> ThreadPoolExecutor:
    global _writer_pool, _writer_key
    size = width * (BACKGROUND_WIDTH + 1)
    with _writer_lock:
        pid = os.getpid()
        if _writer_pool is None or _writer_key[0] != pid or _writer_key[1] < size:
            old = _writer_pool if _writer_key[0] == pid else None  # a fork has no threads
            _writer_pool = ThreadPoolExecutor(size, thread_name_prefix="kq-write")
            _writer_key = (pid, size)
            if old is not None:
                old.shutdown(wait=False)  # its threads end once idle
        return _writer_pool


def _after_fork_in_child() -> None:
    global _writer_pool, _writer_key, _writer_lock
    # The parent's pool has no threads here, and a lock held by one of its threads at
    # the fork would never be released.
    _writer_pool, _writer_key, _writer_lock = None, (0, 0), threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _pooled_call(cluster: Cluster, call: Call) -> str | None:
    """``_call`` in a pool thread. The thread lives on, so a database connection it
    opened (counting an API error) is closed: none is left open between calls."""
    try:
        return _call(cluster, call)
    finally:
        from django.db import connections

        for conn in connections.all(initialized_only=True):
            conn.close()


def _call(cluster: Cluster, call: Call) -> str | None:
    """None when it succeeded, "" when it failed harmlessly, else the error."""
    try:
        if call.verb == "admit":
            cluster.admit(call.ref, node_selector=call.node_selector)
        else:
            cluster.suspend(call.ref)
    except JobNotFound as exc:
        return "" if call.missing_ok else f"{call.what}: {exc}"
    except ClusterError as exc:
        log.warning("cluster call for %s failed: %s", call.what, exc)
        return f"{call.what}: {exc} (will retry at next sync)"
    faults.reach("calls.made")
    return None


# --- calls that run while the caller goes on ----------------------------------------------

# One pass of a cycle worker cycles every tree in turn; a tree's calls (each a round trip
# to the API server, ``write_concurrency`` at a time) need not hold up the next tree's
# cycle, nor the next pass's sync, whose database work they overlap. Two trees' calls
# at once at most.
BACKGROUND_WIDTH = 2
_background: ThreadPoolExecutor | None = None
_background_pid: int | None = None
# The jobs whose calls are on their way in this process: (kind, namespace, name) -> count.
_in_flight: dict[tuple[str, str, str], int] = {}
_in_flight_lock = threading.Lock()


def can_run_in_background(cluster: Cluster) -> bool:
    """Whether the cluster's calls are round trips worth overlapping (an API server); the
    simulated cluster's writes are rows of this database, made in the caller's thread.
    ``KQ_KUBE_BACKGROUND=0`` keeps them in the caller's thread."""
    if os.environ.get("KQ_KUBE_BACKGROUND", "1").strip() == "0":
        return False
    return int(getattr(cluster, "write_concurrency", 1) or 1) > 1


def in_flight(ref: JobRef) -> bool:
    """Whether a call for this job is on its way in this process (the sync does not
    repeat it: it would only race the call it repairs)."""
    with _in_flight_lock:
        return (ref.kind, ref.namespace, ref.name) in _in_flight


def run_calls_in_background(
    cluster: Cluster,
    calls: Sequence[Call],
    fence: Fence,
    errors: list[str],
    then: Callable[[], None],
) -> Future[None]:
    """``run_calls`` in this process's background pool, then ``then`` (in that thread:
    the cycle's bookkeeping and its lease's release, so the lease is held until the
    calls are done, as when they run in the caller's thread)."""
    pool = _pool()  # first: a new pool (this process's first, or after a fork) starts afresh
    keys = [(c.ref.kind, c.ref.namespace, c.ref.name) for c in calls]
    with _in_flight_lock:
        for key in keys:
            _in_flight[key] = _in_flight.get(key, 0) + 1
    try:
        return pool.submit(_in_background, cluster, calls, fence, errors, then, keys)
    except BaseException:
        _forget(keys)
        raise


def _in_background(
    cluster: Cluster,
    calls: Sequence[Call],
    fence: Fence,
    errors: list[str],
    then: Callable[[], None],
    keys: list[tuple[str, str, str]],
) -> None:
    from django.db import connection

    # This thread's own connection, kept between runs (the lease's release, a renewal).
    connection.close_if_unusable_or_obsolete()
    try:
        run_calls(cluster, calls, fence, errors)
    except Exception as exc:  # run_calls raises nothing but a bug; the sync repairs
        log.exception("a cycle's cluster calls failed")
        errors.append(f"cluster calls: {exc}")
    finally:
        _forget(keys)
        then()


def _forget(keys: list[tuple[str, str, str]]) -> None:
    with _in_flight_lock:
        for key in keys:
            left = _in_flight.get(key, 0) - 1
            if left > 0:
                _in_flight[key] = left
            else:
                _in_flight.pop(key, None)


def _pool() -> ThreadPoolExecutor:
    global _background, _background_pid
    if _background is None or _background_pid != os.getpid():  # a fork has no threads
        _background = ThreadPoolExecutor(BACKGROUND_WIDTH, thread_name_prefix="kq-calls")
        _background_pid = os.getpid()
        with _in_flight_lock:
            _in_flight.clear()
    return _background
