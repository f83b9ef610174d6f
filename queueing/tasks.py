"""Celery tasks: thin wrappers around plain functions that tests call directly."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(name="queueing.tick", ignore_result=True)
def tick() -> dict[str, Any]:
    """Sync with the cluster, then run the admission cycle of every quota tree."""
    from queueing.admission import tick as run_tick

    summary = run_tick().as_dict()
    if summary["admitted"] or summary["preempted"] or summary["errors"]:
        log.info("cycle: %s", summary)
    return summary


@shared_task(name="queueing.react", ignore_result=True)
def react(target: str) -> dict[str, Any]:
    """A woken cycle (queueing.wake): a tree's root, "*" for every tree, or "sync"."""
    from queueing.admission import react as run_react

    summary = run_react(target).as_dict()
    if summary["admitted"] or summary["preempted"] or summary["errors"]:
        log.info("react %s: %s", target, summary)
    return summary


@shared_task(name="queueing.sync_cluster", ignore_result=True)
def sync_cluster() -> dict[str, Any]:
    from queueing.sync import sync_cluster as run_sync

    return run_sync().as_dict()


@shared_task(name="queueing.demo_trickle", ignore_result=True)
def demo_trickle() -> int:
    """Keep the demo moving: submit a few jobs of several sizes."""
    from queueing.demo import trickle

    return trickle()
