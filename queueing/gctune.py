"""The garbage collector of long-lived worker processes (the Celery workers, the
cluster watcher).

A cycle worker keeps every tree's live workloads in memory (queueing.world) and makes
thousands of short-lived containers per cycle. With CPython's default thresholds
(700, 10, 10) its collector ran 6,373 young and 27 full collections in one end-to-end
run of Kueue's baseline: 11.6 s of the worker's 70 s of CPU, the full ones 0.33 s each
on average and up to 0.51 s, every thread stopped meanwhile (docs/BENCHMARKS.md, "The
worker's garbage collector"). Tuned as below: 32 collections, 1.3 s.

``tune`` collects once, then freezes what start-up made (modules, settings, the app
registry: never garbage, never scanned again) and raises the thresholds
(``KQ_GC_THRESHOLD``, default 50000,20,100: a young collection per 50,000 net
allocations of containers instead of 700). Reference cycles are still collected, less
often; the process holds a little more garbage between collections.
"""

from __future__ import annotations

import gc
import logging

from django.conf import settings

log = logging.getLogger(__name__)


def tune() -> None:
    """Apply ``KQ_GC_THRESHOLD`` to this process (empty: Python's own defaults)."""
    threshold: tuple[int, ...] | None = settings.KQ_GC_THRESHOLD
    if threshold is None:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*threshold)
    log.debug(
        "garbage collector: %d objects frozen, thresholds %s", gc.get_freeze_count(), threshold
    )
