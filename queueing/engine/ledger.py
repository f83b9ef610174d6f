"""The usage ledger: per quota, decayed consumed resource-seconds.

The ledger gives fair share a memory (Slurm's Fair Tree, Kueue's Admission Fair
Sharing). Values decay with a half-life; a quota that keeps using ``u`` of a
resource converges to ``u * tau`` with ``tau = half_life / ln 2``, which is how
the engine normalises the ledger into a share comparable with the instant one.

All functions are pure: they take and return plain ``{resource: float}`` dicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["charge", "decay", "entry_penalty", "mean_life", "steady_state"]


def mean_life(half_life_s: float) -> float:
    """``tau = half_life / ln 2``: the time constant of the exponential decay."""
    return half_life_s / math.log(2.0)


def _factor(elapsed_s: float, half_life_s: float) -> float:
    if elapsed_s <= 0:
        return 1.0
    if half_life_s <= 0:
        return 0.0
    return 0.5 ** (elapsed_s / half_life_s)


def decay(values: Mapping[str, float], elapsed_s: float, half_life_s: float) -> dict[str, float]:
    """``values`` decayed over ``elapsed_s`` seconds with the given half-life."""
    f = _factor(elapsed_s, half_life_s)
    return {k: v * f for k, v in values.items() if v * f}


def entry_penalty(
    values: Mapping[str, float], request: Mapping[str, int], penalty_s: float
) -> dict[str, float]:
    """Charge an admission at once: ``request * penalty_s`` resource-seconds.

    Without it a burst of admissions made in one cycle would look free until the
    usage accrues; with it the next candidate of the same quota already sees it.
    """
    out = dict(values)
    if penalty_s > 0:
        for k, v in request.items():
            if v:
                out[k] = out.get(k, 0.0) + v * penalty_s
    return out


def charge(
    values: Mapping[str, float],
    usage: Mapping[str, int],
    elapsed_s: float,
    half_life_s: float,
    admitted: Mapping[str, int] | None = None,
    entry_penalty_s: float = 0.0,
) -> dict[str, float]:
    """Advance the ledger by ``elapsed_s`` during which ``usage`` was held.

    Exact for constant usage over the interval: ``L' = L * d + usage * tau * (1 - d)``
    with ``d = 2 ** (-elapsed / half_life)``; with ``half_life <= 0`` there is no
    memory and the plain integral ``usage * elapsed`` is returned. ``admitted`` (the
    total request admitted at the end of the interval) adds the entry penalty.
    """
    out: dict[str, float] = {}
    if elapsed_s > 0:
        if half_life_s > 0:
            d = _factor(elapsed_s, half_life_s)
            gain = mean_life(half_life_s) * (1.0 - d)
        else:
            d, gain = 0.0, elapsed_s
    else:
        d, gain = 1.0, 0.0
    for k, v in values.items():
        out[k] = v * d
    for k, u in usage.items():
        if u:
            out[k] = out.get(k, 0.0) + u * gain
    if admitted:
        out = entry_penalty(out, admitted, entry_penalty_s)
    return {k: v for k, v in out.items() if v}


def steady_state(usage: Mapping[str, int], half_life_s: float) -> dict[str, float]:
    """The ledger a quota converges to when it holds ``usage`` forever."""
    tau = mean_life(half_life_s)
    return {k: v * tau for k, v in usage.items() if v}
