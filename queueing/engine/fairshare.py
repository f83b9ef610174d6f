"""Fair-share scores: who goes first across queues.

* ``instant``: weighted dominant share with the candidate's request,
  ``max_r (used_r + req_r) / runtime_r / fair_weight`` -- the quota furthest below
  its runtime quota goes first (Kueue's fair sharing, DRF).
* ``historical``: the decayed usage ledger normalised the same way,
  ``max_r (ledger_r + req_r * entry_penalty_s) / (runtime_r * tau) / fair_weight`` with
  ``tau = half_life / ln 2``: a quota that has held exactly its runtime quota for a
  long time scores 1, like an instant share of 1. Admissions made earlier in the same
  cycle are charged their entry penalty at once, so a burst is seen immediately.
* ``blended``: ``alpha * instant + (1 - alpha) * historical``.

A demand for a resource with no runtime quota scores infinity (it cannot fit anyway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from queueing.engine.ledger import mean_life

__all__ = ["FairShare"]

INF = math.inf


class FairShare:
    """Scores for every quota of one cycle, updated as admissions happen."""

    __slots__ = (
        "alpha",
        "hist_base",
        "inst_base",
        "ledger",
        "mode",
        "penalty",
        "runtime",
        "tau",
        "used",
        "weight",
    )

    def __init__(
        self,
        mode: str,
        alpha: float,
        half_life_s: float,
        entry_penalty_s: float,
        runtime: Sequence[Mapping[str, int]],
        used: Sequence[Mapping[str, int]],
        ledger: Sequence[Mapping[str, float]],
        weight: Sequence[float],
    ) -> None:
        self.mode = mode
        self.alpha = alpha
        self.tau = mean_life(half_life_s) if half_life_s > 0 else 1.0
        self.penalty = entry_penalty_s
        self.runtime = list(runtime)
        self.used = used
        self.ledger: list[dict[str, float]] = [dict(x) for x in ledger]
        self.weight = [w if w > 0 else 1e-9 for w in weight]
        self.inst_base: list[float] = [
            self._base(u, rt, 1.0) for u, rt in zip(used, runtime, strict=True)
        ]
        self.hist_base: list[float] = [
            self._base(ld, rt, self.tau) for ld, rt in zip(self.ledger, runtime, strict=True)
        ]

    @staticmethod
    def _base(amounts: Mapping[str, float], runtime: Mapping[str, int], norm: float) -> float:
        best = 0.0
        for k, v in amounts.items():
            if v <= 0:
                continue
            cap = runtime.get(k, 0)
            if cap <= 0:
                continue  # holding what has no runtime now: not a reason to go last
            s = v / (cap * norm)
            if s > best:
                best = s
        return best

    def score(self, qi: int, req: Mapping[str, int]) -> float:
        """The candidate's score in quota ``qi`` with request ``req`` (lower goes first)."""
        mode = self.mode
        rt = self.runtime[qi]
        inst = 0.0
        if mode != "historical":
            u = self.used[qi]
            inst = self.inst_base[qi]
            for k, v in req.items():
                cap = rt.get(k, 0)
                if cap <= 0:
                    return INF
                x = (u.get(k, 0) + v) / cap
                if x > inst:
                    inst = x
            if mode == "instant":
                return inst / self.weight[qi]
        ld = self.ledger[qi]
        hist = self.hist_base[qi]
        norm = self.tau
        pen = self.penalty
        for k, v in req.items():
            cap = rt.get(k, 0)
            if cap <= 0:
                return INF
            x = (ld.get(k, 0.0) + v * pen) / (cap * norm)
            if x > hist:
                hist = x
        if mode == "historical":
            return hist / self.weight[qi]
        a = self.alpha
        return (a * inst + (1.0 - a) * hist) / self.weight[qi]

    def shrink(self, qi: int, k: str, cap: int) -> None:
        """Score quota ``qi`` as if its runtime quota of ``k`` were ``cap`` (no more than
        it was): its demand fell below its share, and the next split gives it no more
        than it holds. For the forward simulation, which splits again only now and then
        (:mod:`.forecast_sim`): with the share it had, a quota whose work had just ended
        looked far below it and went first, where the cycle's fresh split ranks it by
        what it keeps (the demo's nlp-research at 0.28 against 0.50)."""
        rt = self.runtime[qi]
        if rt.get(k, 0) <= cap:
            return
        rt = dict(rt)
        rt[k] = cap
        self.runtime[qi] = rt
        self.inst_base[qi] = self._base(self.used[qi], rt, 1.0)
        self.hist_base[qi] = self._base(self.ledger[qi], rt, self.tau)

    def share(self, qi: int) -> float:
        """The quota's current score without a candidate."""
        return self.score(qi, {})

    def admitted(self, qi: int, req: Mapping[str, int]) -> None:
        """Account an admission in quota ``qi`` (``used`` is updated by the caller)."""
        rt = self.runtime[qi]
        u = self.used[qi]
        b = self.inst_base[qi]
        ld = self.ledger[qi]
        h = self.hist_base[qi]
        pen = self.penalty
        norm = self.tau
        for k, v in req.items():
            cap = rt.get(k, 0)
            if cap <= 0:
                continue
            x = u.get(k, 0) / cap
            if x > b:
                b = x
            if pen > 0:
                nv = ld.get(k, 0.0) + v * pen
                ld[k] = nv
                y = nv / (cap * norm)
                if y > h:
                    h = y
        self.inst_base[qi] = b
        self.hist_base[qi] = h
