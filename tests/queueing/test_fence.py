"""Cluster writes are fenced by the lease that ordered them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queueing import lease as leases
from queueing.choices import Phase
from queueing.models import CycleLease, SimJob, Workload
from queueing.sync import sync_cluster
from tests.builders import submit

pytestmark = pytest.mark.django_db


def steal(lease: leases.Lease) -> leases.Lease:
    """Another worker takes the lease after ours expired."""
    CycleLease.objects.filter(name=lease.name).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    other = leases.acquire(lease.name, holder="other:1")
    assert other is not None
    return other


def test_a_fence_renews_a_lease_it_still_holds():
    held = leases.acquire("sync", ttl_s=1.0)  # shorter than a write may take: renew first
    assert held is not None
    fence = leases.Fence(held)
    fence.check()
    assert fence.lease is not None
    assert fence.lease.expires_at > held.expires_at
    assert fence.lease.token == held.token


def test_a_fence_stops_a_worker_that_lost_its_lease():
    held = leases.acquire("sync", ttl_s=1.0)
    assert held is not None
    steal(held)
    with pytest.raises(leases.LeaseLost):
        leases.Fence(held).check()


def test_a_sync_past_its_lease_makes_no_cluster_write(world):
    workload = submit(world, "late")
    Workload.objects.filter(pk=workload.pk).update(phase=Phase.ADMITTED)  # its admit was lost
    held = leases.acquire("sync", ttl_s=1.0)
    assert held is not None
    steal(held)
    with pytest.raises(leases.LeaseLost):
        sync_cluster(world.cluster, now=world.clock(), lease=held)
    assert SimJob.objects.get(name="late").suspended  # left for the next sync...
    report = sync_cluster(
        world.cluster, now=world.clock(), lease=leases.acquire("sync", holder="other:1")
    )
    assert report.readmitted == 1  # ...which does it
    assert not SimJob.objects.get(name="late").suspended
