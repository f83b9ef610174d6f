"""Backfilled history for the demo seed: a fairness chart with something to show from
the first minute.

``backfill`` writes UsageSample rows marked ``backfilled=True`` -- one a minute for
the hours before now -- with usage and runtime quota *estimated* from each quota's
limits (a slow wave around a fraction of its min, deterministic per quota), summed up
the tree as the cycle reports them. The fairness pages hatch that stretch and say it is
estimated. The decayed usage is left empty there: the ledger the engine orders by starts
at zero with the seed, and the chart must not show a memory the engine does not have.
Nothing else is written: no ledger, no workload, no audit event.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from queueing.models import Quota, UsageSample

EVERY = timedelta(minutes=1)  # as the cycle samples (queueing.state.SAMPLE_EVERY)
WAVE_S = 3 * 3600.0


def _estimate(quota: Quota, at: datetime, rng_phase: float, noise: float) -> dict[str, int]:
    level = 0.55 + 0.35 * math.sin(2 * math.pi * at.timestamp() / WAVE_S + rng_phase) + noise
    used = {}
    for resource, amount in (quota.min or {}).items():
        ceiling = int((quota.max or {}).get(resource, amount))
        value = min(ceiling, max(0, int(int(amount) * level)))
        if resource not in ("cpu", "memory"):
            value = round(value)  # devices are whole
        used[resource] = value
    return used


def _total(
    quota: Quota, used: dict[int, dict[str, int]], children: dict[int | None, list[Quota]]
) -> dict[str, int]:
    """A quota's usage as the cycle reports it: its own leaves' summed up its subtree."""
    if quota.pk in used:
        return used[quota.pk]
    summed: dict[str, int] = {}
    for child in children.get(quota.pk, []):
        for resource, amount in _total(child, used, children).items():
            summed[resource] = summed.get(resource, 0) + amount
    used[quota.pk] = summed
    return summed


@transaction.atomic
def backfill(*, hours: float = 6.0, now: datetime | None = None, seed: int = 14) -> int:
    """Estimated samples for every quota over the last ``hours``; returns how many were
    written. Does nothing once any sample exists (it is for a fresh seed only)."""
    if UsageSample.objects.exists():
        return 0
    now = now or timezone.now()
    quotas = list(Quota.objects.all())
    children: dict[int | None, list[Quota]] = defaultdict(list)
    for quota in quotas:
        children[quota.parent_id].append(quota)
    leaves = [q for q in quotas if not children.get(q.pk)]
    rng = random.Random(seed)  # noqa: S311 - demo data, not security
    phases = {q.pk: rng.uniform(0, 2 * math.pi) for q in leaves}
    steps = int(hours * 3600 / EVERY.total_seconds())
    rows = []
    for step in range(steps, 0, -1):
        at = now - step * EVERY
        used: dict[int, dict[str, int]] = {}
        for leaf in leaves:
            used[leaf.pk] = _estimate(leaf, at, phases[leaf.pk], rng.uniform(-0.08, 0.08))

        for quota in quotas:
            held = _total(quota, used, children)
            runtime = {
                resource: min(
                    int((quota.max or {}).get(resource, amount)),
                    max(int(amount), held.get(resource, 0)),
                )
                for resource, amount in (quota.min or {}).items()
            }
            rows.append(
                UsageSample(
                    quota=quota, at=at, used=held, runtime=runtime, decayed={}, backfilled=True
                )
            )
    UsageSample.objects.bulk_create(rows, batch_size=2000)
    return len(rows)
