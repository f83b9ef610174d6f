"""The cycle's singleton lease per quota-tree root, with a fencing token.

A database row per root: taking it is a conditional update that succeeds only when the
lease is free, expired, or already ours, and every take increments the token. apply()
re-checks the token inside its own transaction (row-locked), so a worker that stalled
past its expiry and lost the lease cannot write decisions computed from a stale view.
Works the same on PostgreSQL and SQLite; no extra service is needed.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from queueing.models import CycleLease


class LeaseLost(Exception):
    """Another worker holds the lease now; drop what you were about to write."""


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    token: int
    expires_at: datetime


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def acquire(name: str, *, holder: str | None = None, ttl_s: float | None = None) -> Lease | None:
    """Take the lease of ``name`` if it is free or expired; None when someone holds it."""
    holder = holder or worker_id()
    ttl = timedelta(seconds=ttl_s if ttl_s is not None else settings.KQ_CYCLE_LEASE_S)
    now = timezone.now()
    try:
        with transaction.atomic():
            CycleLease.objects.get_or_create(name=name)
    except IntegrityError:
        pass  # created by a racing worker: fine
    with transaction.atomic():
        taken = CycleLease.objects.filter(
            Q(name=name) & (Q(expires_at__isnull=True) | Q(expires_at__lte=now) | Q(holder=holder))
        ).update(holder=holder, token=F("token") + 1, expires_at=now + ttl)
        if taken != 1:
            return None
        token = CycleLease.objects.values_list("token", flat=True).get(name=name)
    return Lease(name=name, holder=holder, token=token, expires_at=now + ttl)


def check(lease: Lease) -> None:
    """Inside a transaction: lock the lease row and raise LeaseLost unless still ours."""
    row = (
        CycleLease.objects.select_for_update()
        .filter(name=lease.name)
        .values("token", "holder", "expires_at")
        .first()
    )
    if (
        row is None
        or row["token"] != lease.token
        or row["holder"] != lease.holder
        or (row["expires_at"] is not None and row["expires_at"] <= timezone.now())
    ):
        raise LeaseLost(f"the lease {lease.name!r} #{lease.token} is no longer held")


def release(lease: Lease) -> None:
    CycleLease.objects.filter(name=lease.name, token=lease.token, holder=lease.holder).update(
        expires_at=None, holder=""
    )
