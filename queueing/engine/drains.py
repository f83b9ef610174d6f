"""Drains: the room held back on nodes for aged gangs, and who may still use it.

A head that has waited its aging bound, fits its quota but does not place on nodes
holds back its scarcest resource for the rest of the cycle on the nodes where it can
start soonest (:meth:`Drains.starving`, :meth:`Drains.reservation`; see
:mod:`.aging`). Two kinds of work may still use that room: work within its own
quota's guaranteed min, when the head's claim goes beyond its min
(:meth:`Drains.place_within_min`), and work with a declared runtime that ends before
the head can start there (:meth:`Drains.place_backfill`). The cycle
(:class:`.cycle.Cycle`) is a ``Drains``; the state lives in :class:`.cyclestate.CycleState`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from queueing.engine.aging import aging_fraction
from queueing.engine.cyclestate import CycleState, QueueState
from queueing.engine.nodes import EligKey
from queueing.engine.types import WorkloadSpec

__all__ = ["Drains"]


class Drains(CycleState):
    """The drain steps of a cycle (see the module's docstring)."""

    def starving(self, q: QueueState, w: WorkloadSpec, qi: int, c: int) -> None:
        """A head past its aging bound that fits its quota but not the nodes drains them.

        Smaller work would otherwise keep taking every freed slot of its scarcest
        resource, so a large gang never finds room at once: for the rest of the cycle
        that resource on the nodes it may use is held back for it (a backfill
        reservation). Only a strict-order head, whose queue waits for it anyway, or the
        aged head of its quota in any queue (:meth:`hold_aged`). When the head's claim
        goes beyond its quota's min, work within its own min may still use the room
        (:meth:`place_within_min`).
        """
        if c >= 0 or aging_fraction(q.spec, w, self.now) < 1.0 or w.id in self.draining:
            return
        reqs = self.reqs(w)
        if not reqs:
            return
        ps = max(reqs, key=lambda p: (self.nodes._size(p), p.name))
        prim = self.nodes.primary(ps.elig, ps.req)
        if prim is None:
            return
        per_pod = ps.req.get(prim, 0)
        if per_pod <= 0:
            return
        held, until = self.reservation(ps.elig, prim, per_pod, ps.pods)
        take = {i: {prim: f} for i, f in held}
        self.draining[w.id] = prim
        if take:
            self.nodes.commit(take)
            self.drained[w.id] = take
            self.drain_until.append(until)
            if until > self.backfill_until:
                self.backfill_until = until
            if not self.within_min(qi, w._request._d):
                self.yielding.append(take)

    def reservation(
        self, elig: EligKey, prim: str, per_pod: int, pods: int
    ) -> tuple[list[tuple[int, int]], float]:
        """The nodes a starving gang's drain holds, as (node index, free room now), and
        when the gang can start on them at the latest (``now`` when that is not known).

        Hold back only what the gang needs, on the nodes where it can start soonest
        (Slurm reserves the nodes a backfilled job will run on, not the whole
        partition): the eligible nodes (``elig``) as they could hold pods of
        ``per_pod`` of ``prim`` now, then as the work on them ends at the latest it is
        expected (:meth:`end_events`), until together they could hold all ``pods``;
        then the nodes that could hold the most of them by then, until they hold all.
        Counting only the room free now held every free slot of the demo's fragmented
        cpu nodes (15 cpu free on each, 16-cpu pods) and left nothing to the work
        behind while the gang waited for eight of them.
        """
        nodes = self.nodes
        free = nodes.free
        fits: dict[int, int] = {}
        total = 0
        # The placer keeps the eligible nodes sorted by free room: the freest last.
        for f, i in reversed(nodes._sorted_for(elig, prim).entries):
            n = f // per_pod
            if n <= 0:
                break
            fits[i] = n
            total += n
        until = self.now
        if total < pods:
            now_fits = dict(fits)
            now_total = total
            until = self._sweep(self.end_events(elig, prim), fits, total, prim, per_pod, pods)
            # The same sweep with typical ends: backfill must not delay the start the
            # work before it usually allows either (its ends come before the latest).
            typ = self._sweep(
                self.end_events(elig, prim, typical=True), now_fits, now_total, prim, per_pod, pods
            )
            until = min(until, typ)
        out: list[tuple[int, int]] = []
        held = 0
        for i in sorted(fits, key=lambda i: (-fits[i], -free[i].get(prim, 0), i)):
            if held >= pods or fits[i] <= 0:
                break
            held += fits[i]
            f = free[i].get(prim, 0)
            if f > 0:
                out.append((i, f))
        return out, until

    def _sweep(
        self,
        events: Iterable[tuple[float, int, int]],
        fits: dict[int, int],
        total: int,
        prim: str,
        per_pod: int,
        pods: int,
    ) -> float:
        """Add ``events`` (in time order) to ``fits`` (pods of ``per_pod`` each node
        could hold) until they hold ``pods``: when that is (``now`` if never)."""
        free = self.nodes.free
        room: dict[int, int] = {}
        for end, i, v in events:
            r = room.get(i)
            if r is None:
                r = max(0, free[i].get(prim, 0))
            r += v
            room[i] = r
            n = r // per_pod
            total += n - fits.get(i, 0)
            fits[i] = n
            if total >= pods:
                return end
        return self.now

    def place_within_min(self, w: WorkloadSpec, qi: int) -> Any:
        """Place ``w``, whose quota stays within its min with it, on the nodes counting
        as free what drains hold back for heads beyond their own min; take what it uses
        from those drains. The placement, or None.

        A drain (:meth:`starving`) holds a resource on the nodes a head needs, for a
        head that has waited its aging bound or blocks its queue. When that head's
        claim goes beyond its quota's guaranteed min, a guarantee comes first (as Kueue
        admits within nominal quota before borrowing): work within its own quota's min
        may use the held room. Without it, a quota under its min waited while drains
        for other quotas' (or its own) larger, borrowing heads held every free cpu of
        the demo's cpu nodes -- heads that could not place anyway on nodes
        fragmented by running gangs (15 cpu free on each node, 16-cpu pods). What such
        work may take is bounded by the quotas' mins, so the head still gets the rest.
        """
        if not self.yielding or not self.within_min(qi, w._request._d):
            return None
        shape = self.shape(w)
        if shape in self.yield_failed:
            return None
        pl = self._place_on(w, self.yielding)
        if pl is None:
            self.yield_failed.add(shape)
        return pl

    def _place_on(self, w: WorkloadSpec, drains: list[dict[int, dict[str, int]]]) -> Any:
        """Place ``w`` counting the room of ``drains`` as free, and take what it uses
        beyond the nodes' free room from them, drain by drain. The placement, or None."""
        extra: dict[int, dict[str, int]] = {}
        for take in drains:
            for i, amount in take.items():
                e = extra.setdefault(i, {})
                for k, v in amount.items():
                    if v > 0:
                        e[k] = e.get(k, 0) + v
        if not extra:
            return None
        nodes = self.nodes
        pl = nodes.place(self.reqs(w), extra)
        if pl is None:
            return None
        free = nodes.free
        for i, amount in pl.per_node.items():
            for k, v in amount.items():
                over = v - max(0, free[i].get(k, 0))
                for take in drains:
                    if over <= 0:
                        break
                    held = take.get(i)
                    if held is None:
                        continue
                    got = min(over, held.get(k, 0))
                    if got > 0:
                        held[k] -= got
                        nodes.release({i: {k: got}})
                        over -= got
        return pl

    def backfill_end(self, w: WorkloadSpec) -> float | None:
        """When ``w`` would end at the latest if admitted now, if it may try to backfill
        the drains: only work with a declared runtime (a limit), as Slurm backfills only
        jobs with a time limit, that ends before some drain's head can start, and whose
        shape did not already fail with an end as early (``backfill_failed``)."""
        rt = w.expected_runtime_s
        if rt is None or rt <= 0 or not self.config.backfill:
            return None
        end = self.now + rt
        if end > self.backfill_until:
            return None
        failed = self.backfill_failed.get(self.shape(w))
        return end if failed is None or end < failed else None

    def place_backfill(self, w: WorkloadSpec) -> Any:
        """Place ``w`` counting as free the room of the drains whose head starts no
        sooner than ``w`` ends (a backfill: it gives the room back in time), and take
        what it uses from them. The placement, or None."""
        end = self.backfill_end(w)
        if end is None:
            return None
        drains = [
            t
            for t, until in zip(self.drained.values(), self.drain_until, strict=True)
            if until >= end
        ]
        pl = self._place_on(w, drains)
        if pl is None:
            self.backfill_failed[self.shape(w)] = end
        return pl
