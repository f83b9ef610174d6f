"""Why a workload still waits: the engine's structured explanation and its sentence.

Part of the engine's contract (:mod:`queueing.engine.types` re-exports everything here):
the kinds, the reasons a listed victim was not preempted, :class:`Explanation` and the
formatting its sentences use (amounts in the units people read, UTC times).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from queueing.engine.resources import EMPTY, Resources

#: The condition of aging's bound ("starts by T at the latest, unless ..."): the bound is
#: stated for a queue's head, counting the work holding capacity in its quota tree when
#: it is stated. Work that passes the head in its queue, or starts in the tree and ends
#: after the bound, moves it later (``bound_by``/``bound_since`` tell which).
BOUND_CONDITION = (
    "unless work joins its queue ahead of it or starts in its quota tree and ends after then"
)

#: Why a waiting workload's ETA is earlier than that of work ahead of it (``Eta.by_age``).
BY_AGE_NOTE = (
    "Starts before work ahead of it: by then it will have waited past its queue's aging "
    "bound, and aged work goes first."
)

#: Explanation kinds.
EXPLAIN_QUOTA = "quota"  # a quota node's runtime quota or max is too small right now
EXPLAIN_NODES = "nodes"  # quota allows it; no gang placement on schedulable nodes
EXPLAIN_BEHIND = "behind"  # not reached: others ahead were admitted or blocked first
EXPLAIN_BACKOFF = "backoff"  # waiting for requeue_at
EXPLAIN_POLICY = "policy-blocked"  # a Block/Intelligent head ahead does not fit
EXPLAIN_PREEMPTING = "preempting"  # victims are being evicted for it
EXPLAIN_DEPTH = "depth"  # beyond the queue's max_depth look-ahead
EXPLAIN_NEVER = "never-fits"  # larger than any max or any eligible node, ever; with
# limit "cluster" and a to_free, larger than what other trees leave it now (set aside)
EXPLAIN_UNKNOWN = "unknown-queue"  # names a queue or quota the snapshot lacks


#: Why the lower-priority work a quota explanation lists (``victims``) was not preempted
#: for it this cycle (``Explanation.no_preempt``), as the sentence says it.
NO_PREEMPT = {
    "off": "preemption is off",
    "turn": "its queue's one victim search for this quota this cycle went to another workload",
    "failed": "no set of victims this cycle lets it fit (its quota chain and its pods on nodes)",
    "aged": "some of them were admitted by age ahead of it and are not preempted for it",
    "queue": "some of them come from a queue of higher queue priority, which goes ahead of "
    "its own, and are not preempted for it",
    "awaited": "some of them end within the preemption grace period and are awaited, not evicted",
    "min": "taking them would leave their quota below its guaranteed min (it waits for them "
    "to end)",
}


class Explanation(NamedTuple):
    """Why a workload is still pending, structured and JSON-serialisable.

    An immutable named tuple rather than a frozen dataclass: a cycle builds one per
    waiting workload (tens of thousands), and tuples are several times cheaper to make.

    ``quota``/``shortfall`` name the blocking quota node and how much of each resource
    it lacks; for node-fit failures ``largest_free_slot`` is the most free capacity on
    one eligible node. ``ahead`` lists the first workloads ahead of it in its queue and
    ``waiting_ahead`` how many wait ahead of it in all. The unblock hints: ``to_free``
    (capacity that must be freed), ``victims`` (workloads that preemption could take)
    and ``victims_free`` (what they would free of the short resources), ``borrowable``
    (capacity idle under every max on its chain, which its runtime quota does not give
    it). ``starts_by`` is the bound of aging (see :mod:`.aging`): the latest start it
    is promised once its claim is whole and what borrows its share has ended, as long
    as it stays its queue's head (work of higher priority that joins before it ages,
    or preempted work that queued before it and returns, goes ahead of it) and no work
    that ends later starts in its quota tree (the engine goes on admitting work there
    while the head waits; the sentence says both: :data:`BOUND_CONDITION`).
    ``bound_by`` is the workload holding capacity in the tree whose end at the latest
    sets ``starts_by``, and ``bound_since`` when it started (both None when the time
    its claim is whole sets it): a bound later than one stated before for the same
    head, with ``bound_since`` after that statement, was moved by work that started
    in its tree since -- the sentence's condition, not a broken promise.
    For ``preempting``, ``victims`` are the workloads whose capacity is reserved for it:
    being evicted for it (``limit="evicting"``) or expected to finish within the
    preemption grace period, awaited instead of evicted (``limit="finishing"``);
    ``limit`` None with no ``victims``: none is known this cycle. ``awaited_until``:
    for ``limit="finishing"``, the latest moment that work is awaited (its expected end
    plus the grace period); past it, what still runs may be evicted. ``no_preempt``: for
    a quota explanation listing ``victims`` that would free the shortfall, why they were
    not preempted this cycle (a key of :data:`NO_PREEMPT`).
    ``sentence()`` is derived from these fields only, and names workloads by name.
    """

    workload_id: int
    kind: str
    quota: str | None = None
    shortfall: Resources = EMPTY
    # quota: "runtime" | "max" | "cluster" | "min" | "guarantees" (siblings keep their min
    # for their own demand: it asks more than its quota can get now); preempting: see
    # above; policy-blocked: "aged" when the head blocks only because it has aged
    limit: str | None = None
    largest_free_slot: Resources | None = None
    eligible_nodes: int | None = None
    ahead: tuple[int, ...] = ()
    blocked_by: int | None = None
    to_free: Resources = EMPTY
    victims: tuple[int, ...] = ()
    borrowable: Resources = EMPTY
    requeue_at: float | None = None
    detail: str = ""
    waiting_ahead: int = 0
    blocked_by_name: str = ""
    victim_names: tuple[str, ...] = ()
    victims_free: Resources = EMPTY
    starts_by: float | None = None
    awaited_until: float | None = None
    no_preempt: str = ""
    bound_by: int | None = None
    bound_since: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "kind": self.kind,
            "quota": self.quota,
            "shortfall": self.shortfall.to_dict(),
            "limit": self.limit,
            "largest_free_slot": (
                None if self.largest_free_slot is None else self.largest_free_slot.to_dict()
            ),
            "eligible_nodes": self.eligible_nodes,
            "ahead": list(self.ahead),
            "waiting_ahead": self.waiting_ahead,
            "blocked_by": self.blocked_by,
            "blocked_by_name": self.blocked_by_name,
            "to_free": self.to_free.to_dict(),
            "victims": list(self.victims),
            "victim_names": list(self.victim_names),
            "victims_free": self.victims_free.to_dict(),
            "borrowable": self.borrowable.to_dict(),
            "requeue_at": self.requeue_at,
            "starts_by": self.starts_by,
            "awaited_until": self.awaited_until,
            "no_preempt": self.no_preempt,
            "bound_by": self.bound_by,
            "bound_since": self.bound_since,
            "detail": self.detail,
            "sentence": self.sentence(),
        }

    def sentence(self) -> str:
        """One sentence for people, derived from the fields alone."""
        ahead = ""
        if self.waiting_ahead:
            n = self.waiting_ahead
            ahead = f" {n} workload{'s' if n != 1 else ''} ahead in its queue."
        bound = ""
        if self.starts_by is not None:
            bound = (
                f" Aging raises its claim on its quota: it starts by "
                f"{fmt_time(self.starts_by)} at the latest, {BOUND_CONDITION}."
            )
        kind = self.kind
        if kind == EXPLAIN_QUOTA and self.limit == "min":
            return f"Waiting for quota: {self.detail}." + ahead + bound
        if kind == EXPLAIN_QUOTA and self.limit == "guarantees":
            return (
                f"Waiting for quota: {self.quota} is short by {fmt(self.shortfall)} "
                f"and cannot borrow it: {self.detail}." + ahead + bound
            )
        if kind == EXPLAIN_QUOTA:
            what = {"max": "max", "cluster": "share of the cluster"}.get(
                self.limit or "", "runtime quota"
            )
            text = f"Waiting for quota: {self.quota} {what} is short by {fmt(self.shortfall)}"
            hints = []
            if self.victims:
                who = _names(self.victim_names, len(self.victims))
                if covers(self.victims_free, self.shortfall):
                    why = NO_PREEMPT.get(self.no_preempt, self.no_preempt)
                    hints.append(f"preempting {who} would free it, but {why}")
                else:
                    hints.append(
                        f"preempting {who} would free only {fmt(self.victims_free)}, not enough"
                    )
            idle = {k: v for k, v in self.borrowable.items() if v > 0}
            if idle:
                # Only the resources it is short of: the idle memory of a quota short
                # of cpu says nothing about why it waits.
                enough = {k: v for k, v in idle.items() if 0 < self.shortfall.get(k, 0) <= v}
                less = {k: v for k, v in idle.items() if v < self.shortfall.get(k, 0)}
                if enough and self.limit == "runtime":
                    verb = "is" if len(enough) == 1 else "are"
                    hints.append(
                        f"{fmt(enough)} {verb} idle but its runtime quota leaves "
                        f"{'it' if len(enough) == 1 else 'them'} to other "
                        f"quotas (their guaranteed minimum or waiting work)"
                    )
                if less:
                    hints.append(f"it could borrow only {fmt(less)} more")
            if hints:
                text += "; " + "; ".join(hints)
            return text + "." + ahead + bound
        if kind == EXPLAIN_NODES:
            slot = (
                "no eligible node"
                if not self.eligible_nodes
                else f"the largest free slot on {self.eligible_nodes} eligible node(s) "
                f"is {fmt(self.largest_free_slot or EMPTY)}"
            )
            return (
                f"Quota allows it, but its pods do not all fit on nodes at once: {slot}."
                f"{ahead}{bound}"
            )
        if kind == EXPLAIN_POLICY:
            why = f" ({self.detail})" if self.detail else ""
            head = self.blocked_by_name or "the head of its queue"
            if self.limit == "aged":
                return (
                    f"Blocked behind {head}, which has waited its queue's aging bound and "
                    f"keeps its quota's room in this queue until it starts{why}.{ahead}"
                )
            return (
                f"Blocked behind {head}, the head "
                f"of a strict-order queue that does not fit yet{why}.{ahead}"
            )
        if kind == EXPLAIN_BACKOFF:
            until = fmt_time(self.requeue_at) if self.requeue_at is not None else "later"
            return f"Backing off after a failed start or eviction until {until}."
        if kind == EXPLAIN_PREEMPTING:
            if not self.victims:
                return (
                    "Capacity is reserved for this workload until it starts; which workloads "
                    "release it is not known this cycle."
                )
            who = _names(self.victim_names, len(self.victims))
            if self.limit == "finishing":
                until = (
                    ", so not evicted"
                    if self.awaited_until is None
                    else f": awaited until {fmt_time(self.awaited_until)}, then evicted if "
                    f"still running"
                )
                return (
                    f"Waiting for {who} to finish (expected within the preemption grace "
                    f"period{until}); the capacity released is reserved for this workload."
                )
            their = "its" if len(self.victims) == 1 else "their"
            return (
                f"Waiting for {who} (preempted for it) to release {their} capacity; "
                f"it is reserved for this workload."
            )
        if kind == EXPLAIN_DEPTH:
            return f"Beyond its queue's look-ahead depth this cycle.{ahead}"
        if kind == EXPLAIN_NEVER and self.limit == "cluster" and self.to_free:
            # Set aside this cycle, but not beyond the cluster: room others hold now.
            return (
                f"Waiting for room held by other quota trees: {self.detail}; set aside "
                f"until then, it blocks nobody.{bound}"
            )
        if kind == EXPLAIN_NEVER:
            return f"Can never be admitted as specified: {self.detail}."
        if kind == EXPLAIN_UNKNOWN:
            return f"Cannot be considered: {self.detail}."
        return f"Waiting its turn.{ahead}"


def _names(names: tuple[str, ...], n: int) -> str:
    if not names:
        return f"{n} workload{'s' if n != 1 else ''}"
    if len(names) <= 3:
        return ", ".join(names)
    return f"{', '.join(names[:3])} and {len(names) - 3} more"


def covers(have: Mapping[str, int], need: Mapping[str, int]) -> bool:
    """Whether ``have`` is at least ``need`` in every resource ``need`` names."""
    return all(have.get(k, 0) >= v for k, v in need.items() if v > 0)


def fmt_amount(resource: str, amount: int) -> str:
    """A canonical amount in the units people use: cores, Gi, counts."""
    if resource in ("cpu",) or resource.endswith("-cpu"):
        return f"{amount / 1000:g} cpu"
    if resource in ("memory", "ephemeral-storage") or resource.endswith("-memory"):
        gi = amount / 2**30
        text = f"{gi:.0f}" if gi >= 100 else f"{gi:.3g}"
        return f"{text}Gi {resource}"
    return f"{amount} {resource}"


def fmt(res: Mapping[str, int]) -> str:
    """Several amounts, sorted by resource name."""
    if not res:
        return "nothing"
    return ", ".join(fmt_amount(k, res[k]) for k in sorted(res))


def fmt_time(at: float) -> str:
    """An epoch time as people read it (UTC)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
