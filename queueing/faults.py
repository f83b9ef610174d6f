"""Crash points for tests that kill a worker inside a write (tests/e2e/test_worker_kills.py).

``reach("apply.committed")`` does nothing unless the process was started with
``KQ_FAULT=apply.committed``; then the process SIGKILLs itself there, as the OOM killer
or a node failure would: no ``finally``, no rollback by Python, no goodbye to the
broker. ``KQ_FAULT=name:3`` kills at the third time the point is reached with work to
do. Points are named after the write path and the boundary they sit on (before the
commit, after it, between cluster calls); ``POINTS`` lists them all.

A point costs one dictionary lookup when no fault is set. Nothing but tests sets it.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "KQ_FAULT"

POINTS = {
    # state.apply: the cycle's one transaction, then its cluster calls.
    "apply.before_commit": "every write of the cycle made, the transaction not committed",
    "apply.committed": "the cycle committed, no cluster call made yet",
    # state.calls: the one loop for cluster calls after a commit (apply's and the sync's);
    # "calls.made:2" kills after the second call that succeeded, amid the others.
    "calls.made": "a cluster call made, the calls after it not",
    # state.placement: the node lock taken inside the apply's transaction.
    "placement.locked": "the placement lock held, nothing of the cycle written yet",
    # sync: a chunk's transitions, then the repairs it found. On PostgreSQL a chunk is one
    # statement outside any transaction (actions.transitions.one_statement), so no moment
    # holds it written but uncommitted: the point comes before the statement.
    "sync.before_commit": (
        "a chunk's transitions decided, none committed: PostgreSQL, none written (one "
        "statement, no transaction); SQLite, written in the chunk's open transaction"
    ),
    "sync.committed": "a chunk committed, its repairs (cluster calls) not made",
    # admission.react: the woken cycle on the cycle queue.
    "react.taken": "the wake taken (its key dropped), nothing cycled yet",
    # maxexec: stopping what ran past its limit, one workload at a time.
    "maxexec.between": "one workload stopped, the next not yet",
    # quotawriteback: an ElasticQuota patched, the patch not remembered.
    "quotawriteback.patched": "the annotations written, not yet recorded as written",
}

_reached: dict[str, int] = {}


def reach(name: str, *, work: int = 1) -> None:
    """Kill this process here when ``KQ_FAULT`` names this point (and there is ``work``)."""
    spec = os.environ.get(ENV)
    if not spec or work <= 0:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] < int(nth or 1):
        return
    sys.stderr.write(f"kq fault: killed at {name} (pid {os.getpid()})\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
