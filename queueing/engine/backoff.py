"""Exponential backoff for workloads that failed to start or were evicted.

Pure and deterministic: the jitter comes from a hash of ``seed`` and ``attempts``,
so the database side can recompute the same ``requeue_at`` (for example the
workload id as the seed) and tests need no random state.
"""

from __future__ import annotations

import hashlib

__all__ = ["delay", "requeue_at"]


def _unit(seed: int | str, attempts: int) -> float:
    """A deterministic number in [-1, 1) derived from ``seed`` and ``attempts``."""
    digest = hashlib.blake2b(f"{seed}:{attempts}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**63 - 1.0


def delay(attempts: int, base: float, cap: float, jitter: float, seed: int | str = 0) -> float:
    """Seconds to wait before the ``attempts``-th retry (1-based).

    ``min(cap, base * 2 ** (attempts - 1))`` scaled by a factor in
    ``[1 - jitter, 1 + jitter)`` and clamped to ``[0, cap]``. ``attempts <= 0`` waits 0.
    """
    if attempts <= 0 or base <= 0:
        return 0.0
    # Cap the exponent: 2**1000 overflows a float long before it matters.
    raw = min(cap, base * 2.0 ** min(attempts - 1, 60))
    if jitter > 0:
        raw *= 1.0 + jitter * _unit(seed, attempts)
    return max(0.0, min(cap, raw))


def requeue_at(
    now: float, attempts: int, base: float, cap: float, jitter: float, seed: int | str = 0
) -> float:
    """Epoch seconds at which a workload on its ``attempts``-th retry competes again."""
    return now + delay(attempts, base, cap, jitter, seed)
