"""Gang fit on nodes: all pods of all pod sets are placed at once, or none.

Placement is best-fit decreasing: pod sets go largest first; each pod goes to the
eligible node with the least free capacity (in the pod set's scarcest resource) that
still fits it in every resource, and as many pods of the set as fit go there before
moving on (which is what pod-by-pod best fit would do anyway). Ties break by node
name, so the result is deterministic.

A node is eligible for a pod set when it is schedulable, its labels satisfy the node
selector (pools are just labels), and every NoSchedule/NoExecute taint is tolerated.

Free capacity is ``allocatable - reserved - held``. For speed, each (eligible set,
scarce resource) pair keeps a list of ``(free, node)`` sorted ascending, so finding
the best fit is a bisection plus a short scan; lists are updated when a placement
is committed. Within one cycle free capacity only shrinks, which lets callers
memoise failures.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from queueing.engine.resources import Resources
from queueing.engine.types import NodeSpec, PodSet, Toleration, WorkloadSpec, fmt_amount

__all__ = ["NodeIndex", "Placement", "PodSetReq"]

#: A gang of several pod sets whose eligible nodes number at most this is placed on
#: them emptied to tell whether it can ever fit (:meth:`NodeIndex.never_fits`).
JOINT_PLACE_NODES = 64

#: Key of an eligible node set: (sorted node-selector items, tolerations).
EligKey = tuple[tuple[tuple[str, str], ...], tuple[Toleration, ...]]


class PodSetReq(NamedTuple):
    """One pod set as the placer sees it."""

    name: str
    pods: int
    req: Mapping[str, int]
    elig: EligKey


class Placement(NamedTuple):
    """A successful gang placement (not yet committed)."""

    placements: tuple[tuple[str, int, int], ...]  # (pod_set, node index, count)
    per_node: dict[int, dict[str, int]]  # node index -> resources taken


def elig_key(ps: PodSet) -> EligKey:
    """The eligibility key of a pod set: (sorted node-selector items, tolerations).

    Made once with the pod set (``PodSet._elig``)."""
    return ps._elig


def podset_reqs(pod_sets: Iterable[PodSet]) -> tuple[PodSetReq, ...]:
    """Pod sets reduced to what placement needs (zero-count sets dropped)."""
    return tuple(
        PodSetReq(ps.name, ps.count, ps.requests.raw, elig_key(ps))
        for ps in pod_sets
        if ps.count > 0
    )


class _Sorted:
    """Eligible nodes of one key sorted by free capacity in one resource."""

    __slots__ = ("entries", "resource")

    def __init__(self, resource: str, entries: list[tuple[int, int]]) -> None:
        self.resource = resource
        self.entries = entries


class NodeIndex:
    """Free capacity of the schedulable nodes, with gang placement.

    Nodes are numbered by name order. ``free`` may go negative when a node holds more
    than it has (it shrank, or the cluster over-committed it); such a node fits nothing.
    """

    def __init__(self, nodes: Sequence[NodeSpec], pool_label: str = "") -> None:
        ordered = sorted(nodes, key=lambda n: n.name)
        self.specs: list[NodeSpec] = ordered
        self.names: list[str] = [n.name for n in ordered]
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.pool_label = pool_label
        self.free: list[dict[str, int]] = []
        #: Per node, its room when nothing runs there (allocatable - reserved).
        self.empty_room: list[dict[str, int]] = []
        capacity: dict[str, int] = {}
        for n in ordered:
            f: dict[str, int] = dict(n.allocatable.raw)
            for k, v in n.reserved.raw.items():
                f[k] = f.get(k, 0) - v
            self.free.append(f)
            self.empty_room.append(dict(f))
            if not n.unschedulable:
                for k, v in f.items():
                    if v > 0:
                        capacity[k] = capacity.get(k, 0) + v
        #: Schedulable capacity (allocatable - reserved) summed over schedulable nodes.
        self.capacity: dict[str, int] = capacity
        self._elig: dict[EligKey, list[int]] = {}
        #: The same as sets (a placement with extra room asks per pod set).
        self._elig_sets: dict[EligKey, frozenset[int]] = {}
        #: Eligibility key -> resource -> its sorted list (two levels: no key tuple
        #: to build and hash per lookup).
        self._sorted: dict[EligKey, dict[str, _Sorted]] = {}
        self._lists_of_node: list[list[_Sorted]] = [[] for _ in ordered]
        self._max_alloc: dict[EligKey, dict[str, int]] = {}
        #: Eligibility keys of a gang's pod sets -> (their eligible nodes, the room of
        #: those nodes when empty): for :meth:`never_fits`.
        self._joint: dict[tuple[EligKey, ...], tuple[list[int], dict[str, int]]] = {}

    def clone(self) -> NodeIndex:
        """An independent copy of the free capacity (and its sorted indexes)."""
        other = NodeIndex.__new__(NodeIndex)
        other.specs = self.specs
        other.names = self.names
        other.index = self.index
        other.pool_label = self.pool_label
        other.capacity = self.capacity
        other.free = [dict(f) for f in self.free]
        other.empty_room = self.empty_room
        other._elig = self._elig
        other._elig_sets = self._elig_sets
        other._max_alloc = self._max_alloc
        other._joint = self._joint
        other._sorted = {}
        other._lists_of_node = [[] for _ in self.names]
        for key, by_resource in self._sorted.items():
            mine: dict[str, _Sorted] = {}
            other._sorted[key] = mine
            for resource, lst in by_resource.items():
                copy = _Sorted(lst.resource, list(lst.entries))
                mine[resource] = copy
                for _, i in copy.entries:
                    other._lists_of_node[i].append(copy)
        return other

    # -- holdings --------------------------------------------------------------------

    def hold(self, node: str, amount: Mapping[str, int]) -> bool:
        """Count ``amount`` as held on ``node`` (before any placement). False if unknown."""
        i = self.index.get(node)
        if i is None:
            return False
        if self._lists_of_node[i]:
            self.commit({i: amount})
        else:
            f = self.free[i]
            for k, v in amount.items():
                f[k] = f.get(k, 0) - v
        return True

    def hold_all(self, workloads: Iterable[WorkloadSpec]) -> None:
        """:meth:`hold` every workload's assignment (nodes not in the index ignored)."""
        if any(self._lists_of_node):
            for w in workloads:
                for node, amount in w.assignment.items():
                    self.hold(node, amount.raw)
            return
        # No sorted list yet (a fresh index): only the free amounts change.
        index = self.index
        free = self.free
        for w in workloads:
            for node, amount in w.assignment.items():
                i = index.get(node)
                if i is not None:
                    f = free[i]
                    for k, v in amount._d.items():
                        f[k] = f.get(k, 0) - v

    def commit(self, per_node: Mapping[int, Mapping[str, int]]) -> None:
        """Take the resources of a placement (or a reservation) from free capacity."""
        for i, amount in per_node.items():
            lists = self._lists_of_node[i]
            f = self.free[i]
            if lists:
                for lst in lists:
                    r = lst.resource
                    old = (f.get(r, 0), i)
                    entries = lst.entries
                    pos = bisect_left(entries, old)
                    if pos < len(entries) and entries[pos] == old:
                        del entries[pos]
            for k, v in amount.items():
                f[k] = f.get(k, 0) - v
            for lst in lists:
                insort(lst.entries, (f.get(lst.resource, 0), i))

    def release(self, per_node: Mapping[int, Mapping[str, int]]) -> None:
        """Give resources back (used by the forecast's virtual time)."""
        self.commit({i: {k: -v for k, v in amount.items()} for i, amount in per_node.items()})

    # -- eligibility -----------------------------------------------------------------

    def eligible(self, key: EligKey) -> list[int]:
        """Indices of schedulable nodes eligible for pod sets with this key."""
        got = self._elig.get(key)
        if got is not None:
            return got
        selector, tolerations = key
        out: list[int] = []
        for i, n in enumerate(self.specs):
            if n.unschedulable:
                continue
            labels = n.labels
            if selector and any(labels.get(k) != v for k, v in selector):
                continue
            if n.taints and not all(
                not t.blocks_scheduling() or any(tol.tolerates(t) for tol in tolerations)
                for t in n.taints
            ):
                continue
            out.append(i)
        self._elig[key] = out
        return out

    def eligible_set(self, key: EligKey) -> frozenset[int]:
        """:meth:`eligible` as a set (made once per key)."""
        got = self._elig_sets.get(key)
        if got is None:
            got = self._elig_sets[key] = frozenset(self.eligible(key))
        return got

    def max_alloc(self, key: EligKey) -> dict[str, int]:
        """Per resource, the largest allocatable among eligible nodes."""
        got = self._max_alloc.get(key)
        if got is None:
            got = {}
            for i in self.eligible(key):
                for k, v in self.specs[i].allocatable.raw.items():
                    if v > got.get(k, 0):
                        got[k] = v
            self._max_alloc[key] = got
        return got

    def primary(self, key: EligKey, req: Mapping[str, int]) -> str | None:
        """The pod's scarcest resource relative to the biggest eligible node."""
        ma = self.max_alloc(key)
        best: str | None = None
        best_ratio = -1.0
        for k in sorted(req):
            v = req[k]
            if v <= 0:
                continue
            cap = ma.get(k, 0)
            ratio = v / cap if cap > 0 else float("inf")
            if ratio > best_ratio:
                best, best_ratio = k, ratio
        return best

    def _sorted_for(self, key: EligKey, resource: str) -> _Sorted:
        by_resource = self._sorted.get(key)
        if by_resource is None:
            by_resource = self._sorted[key] = {}
        lst = by_resource.get(resource)
        if lst is None:
            lst = self._new_sorted(key, resource)
            by_resource[resource] = lst
        return lst

    def _new_sorted(self, key: EligKey, resource: str) -> _Sorted:
        elig = self.eligible(key)
        free = self.free
        lst = _Sorted(resource, sorted((free[i].get(resource, 0), i) for i in elig))
        for i in elig:
            self._lists_of_node[i].append(lst)
        return lst

    def may_fit(self, elig: EligKey, req: Mapping[str, int]) -> bool:
        """A cheap necessary condition: some eligible node has ``req[r]`` free, each r.

        Uses the largest free amount per resource (the last entry of each sorted list),
        so a pod that passes may still not fit on any single node.
        """
        by_resource = self._sorted.get(elig)
        if by_resource is None:
            by_resource = self._sorted[elig] = {}
        for r, v in req.items():
            if v > 0:
                lst = by_resource.get(r)
                if lst is None:
                    lst = by_resource[r] = self._new_sorted(elig, r)
                entries = lst.entries
                if not entries or entries[-1][0] < v:
                    return False
        return True

    # -- placement -------------------------------------------------------------------

    def place(
        self,
        pod_sets: Sequence[PodSetReq],
        extra: Mapping[int, Mapping[str, int]] | None = None,
    ) -> Placement | None:
        """Best-fit-decreasing gang placement, or None when some pod does not fit.

        ``extra`` is capacity to treat as free on top of ``free`` (for example what
        preemption victims hold). Nothing is changed; call :meth:`commit` to take it.
        """
        free = self.free
        taken: dict[int, dict[str, int]] = {}
        eff_cache: dict[int, dict[str, int]] = {}
        placements: list[tuple[str, int, int]] = []
        order = (
            pod_sets
            if len(pod_sets) == 1
            else sorted(pod_sets, key=lambda p: (-self._size(p), p.name))
        )
        for ps in order:
            req = ps.req
            remaining = ps.pods
            prim = self.primary(ps.elig, req)
            if prim is None:
                # Pods that request nothing: any eligible node takes them all.
                elig = self.eligible(ps.elig)
                if not elig:
                    return None
                placements.append((ps.name, elig[0], remaining))
                continue
            need = req[prim]
            lst = self._sorted_for(ps.elig, prim).entries
            elig_set: frozenset[int] | None = None
            # Nodes whose sorted key is stale for this search -- partly taken by this
            # gang, or carrying extra capacity -- are checked one by one, from a cache
            # of their effective free capacity. A node that got pods of this set took
            # as many as fit, so it is done for the set.
            done: set[int] = set()
            while remaining > 0:
                best_i = -1
                best_free = 0
                special = set(taken)
                if extra:
                    special.update(extra)
                for i in special:
                    if i in done:
                        continue
                    if elig_set is None:
                        elig_set = self.eligible_set(ps.elig)
                    if i not in elig_set:
                        done.add(i)
                        continue
                    eff = eff_cache.get(i)
                    if eff is None:
                        eff = eff_cache[i] = self._effective(i, taken, extra)
                    if _fits(req, eff):
                        fp = eff.get(prim, 0)
                        if best_i < 0 or (fp, i) < (best_free, best_i):
                            best_i, best_free = i, fp
                    else:
                        done.add(i)
                # The first non-special node in the sorted list that fits all resources.
                pos = bisect_left(lst, (need, -1))
                n_entries = len(lst)
                while pos < n_entries:
                    fp, i = lst[pos]
                    if best_i >= 0 and (fp, i) >= (best_free, best_i):
                        break
                    if i not in special and _fits(req, free[i]):
                        best_i, best_free = i, fp
                        break
                    pos += 1
                if best_i < 0:
                    return None
                eff = eff_cache.get(best_i)
                if eff is None:
                    eff = self._effective(best_i, taken, extra)
                k = remaining
                for r, v in req.items():
                    if v > 0:
                        m = eff.get(r, 0) // v
                        if m < k:
                            k = m
                t = taken.setdefault(best_i, {})
                for r, v in req.items():
                    t[r] = t.get(r, 0) + v * k
                    eff[r] = eff.get(r, 0) - v * k
                eff_cache[best_i] = eff
                done.add(best_i)
                placements.append((ps.name, best_i, k))
                remaining -= k
        return Placement(tuple(placements), taken)

    def _effective(
        self,
        i: int,
        taken: Mapping[int, Mapping[str, int]],
        extra: Mapping[int, Mapping[str, int]] | None,
    ) -> dict[str, int]:
        eff = dict(self.free[i])
        t = taken.get(i)
        if t:
            for k, v in t.items():
                eff[k] = eff.get(k, 0) - v
        if extra:
            x = extra.get(i)
            if x:
                for k, v in x.items():
                    eff[k] = eff.get(k, 0) + v
        return eff

    def _size(self, ps: PodSetReq) -> float:
        cap = self.capacity
        # Per pod, not per set: decreasing order is about item size.
        return sum(v / cap[k] if cap.get(k) else float(v) for k, v in ps.req.items())

    # -- explanations ----------------------------------------------------------------

    def largest_slot(self, pod_sets: Sequence[PodSetReq]) -> tuple[Resources | None, int]:
        """The most free capacity on one eligible node, and how many nodes are eligible.

        For several pod sets, the first (largest) pod set's view is reported.
        """
        if not pod_sets:
            return None, 0
        ps = max(pod_sets, key=lambda p: (self._size(p), p.name))
        elig = self.eligible(ps.elig)
        if not elig:
            return None, 0
        prim = self.primary(ps.elig, ps.req)
        if prim is None:
            return Resources.from_raw(self.free[elig[0]]), len(elig)
        entries = self._sorted_for(ps.elig, prim).entries
        _, i = entries[-1]
        return Resources.from_raw({k: v for k, v in self.free[i].items() if v > 0}), len(elig)

    def never_fits(self, pod_sets: Sequence[PodSetReq]) -> str | None:
        """Why this gang cannot fit even on empty eligible nodes, or None."""
        for ps in pod_sets:
            elig = self.eligible(ps.elig)
            if not elig:
                return f"no schedulable node matches pod set {ps.name!r}"
            pods = 0
            for i in elig:
                room = self.empty_room[i]
                if _fits(ps.req, room):
                    pods += min(
                        (room.get(r, 0) // v for r, v in ps.req.items() if v > 0),
                        default=ps.pods,
                    )
                    if pods >= ps.pods:
                        break
            if pods == 0:
                return f"no eligible node is large enough for one pod of {ps.name!r}"
            if pods < ps.pods:
                return (
                    f"even empty, the eligible nodes hold only {pods} of the "
                    f"{ps.pods} pods of {ps.name!r}"
                )
        if len(pod_sets) > 1:
            # Each pod set fits alone; together they may not (two pod sets of 4 and 6
            # cpu whose only eligible node has 8: the gang held a drain there for good,
            # and smaller work never started -- the liveness property test). First what
            # they ask in all against the eligible nodes' room; then, on at most
            # JOINT_PLACE_NODES eligible nodes, placed as the cycle places them on those
            # nodes emptied of what runs there (more nodes: the sums only, a placement
            # over thousands of nodes with extra room costs a cycle ~0.05 s).
            keys = tuple(sorted({ps.elig for ps in pod_sets}, key=repr))
            got = self._joint.get(keys)
            if got is None:
                union = sorted({i for ps in pod_sets for i in self.eligible(ps.elig)})
                whole: dict[str, int] = {}
                for i in union:
                    for k, v in self.empty_room[i].items():
                        whole[k] = whole.get(k, 0) + v
                got = self._joint[keys] = (union, whole)
            union, whole = got
            asked: dict[str, int] = {}
            for ps in pod_sets:
                for k, v in ps.req.items():
                    asked[k] = asked.get(k, 0) + v * ps.pods
            names = ", ".join(repr(ps.name) for ps in pod_sets)
            for k, v in asked.items():
                if v > whole.get(k, 0):
                    return (
                        f"even empty, the eligible nodes hold {fmt_amount(k, whole.get(k, 0))} "
                        f"of the {fmt_amount(k, v)} its pod sets {names} ask together"
                    )
            if len(union) <= JOINT_PLACE_NODES:
                empty: dict[int, dict[str, int]] = {}
                for i in union:
                    free = self.free[i]
                    held = {}
                    for k, v in self.empty_room[i].items():
                        h = v - free.get(k, 0)
                        if h > 0:
                            held[k] = h
                    empty[i] = held
                if self.place(pod_sets, empty) is None:
                    return (
                        f"even empty, the eligible nodes do not hold its pod sets {names} at once"
                    )
        return None

    def pool_of(self, node_indices: Iterable[int]) -> str | None:
        """The pool label shared by all these nodes, or None."""
        if not self.pool_label:
            return None
        pools = {self.specs[i].labels.get(self.pool_label) for i in node_indices}
        if len(pools) == 1:
            return pools.pop()
        return None


def _fits(req: Mapping[str, int], free: Mapping[str, int]) -> bool:
    get = free.get
    # A plain loop: measurably faster than all() over a generator here.
    for k, v in req.items():  # noqa: SIM110
        if v > get(k, 0):
            return False
    return True
