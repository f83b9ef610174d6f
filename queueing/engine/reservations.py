"""Room the cycle keeps free on nodes for waiting workloads.

A waiting preemptor's reservation is what it needs beyond what its victims release,
per quota of its chain and per node of its placement (:func:`beyond_victims`);
``CycleState.reserve`` takes it, the forecast holds it again in virtual time and
grows it as awaited victims end (:mod:`.forecast_preempt`), from the same
:class:`Reservation`. With the drains of aged heads (:mod:`.drains`) it is what the
cycle's result names as kept, not idle (:func:`node_holds`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from queueing.engine.resources import Resources
from queueing.engine.types import NodeHold

__all__ = ["Reservation", "beyond_victims", "node_holds", "reservation"]

#: Per node index (or per quota index): amounts per resource.
Amounts = dict[int, dict[str, int]]


class Reservation(NamedTuple):
    """A waiting preemptor's reservation and what it is made from."""

    qi: int
    req: Mapping[str, int]
    #: What its victims free per quota of its chain, and per node index.
    freed: Mapping[int, Mapping[str, int]]
    node_extra: Mapping[int, Mapping[str, int]]
    #: Its placement, per node index (empty when it did not place).
    per_node: Mapping[int, Mapping[str, int]]
    #: What it needs beyond them: per quota of its chain, and per node index.
    held: Amounts
    take: Amounts


def beyond_victims(
    chain: Sequence[int],
    req: Mapping[str, int],
    freed: Mapping[int, Mapping[str, int]],
    per_node: Mapping[int, Mapping[str, int]],
    node_extra: Mapping[int, Mapping[str, int]],
) -> tuple[Amounts, Amounts]:
    """What a waiting preemptor asking ``req`` needs beyond what its victims release:
    per quota of its ``chain`` (they free ``freed`` there), and per node of its
    placement ``per_node`` (they free ``node_extra`` there)."""
    held: Amounts = {}
    for c in chain:
        fr = freed.get(c, {})
        for k, v in req.items():
            if v - fr.get(k, 0) > 0:
                held.setdefault(c, {})[k] = v - fr.get(k, 0)
    take: Amounts = {}
    for i, amount in per_node.items():
        x = node_extra.get(i, {})
        t = {k: v - x.get(k, 0) for k, v in amount.items() if v - x.get(k, 0) > 0}
        if t:
            take[i] = t
    return held, take


def reservation(
    chain: Sequence[int],
    qi: int,
    req: Mapping[str, int],
    freed: Mapping[int, Mapping[str, int]],
    per_node: Mapping[int, Mapping[str, int]] | None,
    node_extra: Mapping[int, Mapping[str, int]],
) -> Reservation:
    """The reservation of a preemptor of quota ``qi`` (``chain``: its chain)."""
    placed = per_node or {}
    held, take = beyond_victims(chain, req, freed, placed, node_extra)
    return Reservation(qi, req, freed, node_extra, placed, held, take)


def node_holds(
    names: Sequence[str],
    drains: Iterable[tuple[int, Mapping[int, Mapping[str, int]]]],
    reservations: Mapping[int, Reservation],
) -> tuple[NodeHold, ...]:
    """The free room kept on nodes, by node and workload: ``drains`` (head id, what
    its drain holds per node index) and the ``reservations``."""
    out: list[NodeHold] = []
    for kind, takes in (
        ("drain", drains),
        ("reservation", ((wid, r.take) for wid, r in reservations.items())),
    ):
        for wid, take in takes:
            for i, amount in sorted(take.items()):
                if any(v > 0 for v in amount.values()):
                    out.append(NodeHold(names[i], wid, kind, Resources.from_raw(amount)))
    return tuple(out)
