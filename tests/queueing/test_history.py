"""The demo seed's backfilled history: estimated, marked, within each quota's limits,
summed up the tree, and never a memory the ledger does not have."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queueing import demo, history
from queueing.models import Quota, UsageLedger, UsageSample


@pytest.mark.django_db
def test_the_seed_comes_with_six_hours_of_marked_estimated_history(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    before = timezone.now()
    demo.seed()
    quotas = {q.pk: q for q in Quota.objects.all()}
    samples = list(UsageSample.objects.all())
    assert len(samples) == 6 * 60 * len(quotas)
    assert all(s.backfilled for s in samples)
    assert min(s.at for s in samples) >= before - timedelta(hours=6, minutes=1)
    assert max(s.at for s in samples) < timezone.now()
    assert all(s.decayed == {} for s in samples)  # the ledger starts at zero: so does the chart
    assert not UsageLedger.objects.exists()
    for sample in samples:
        quota = quotas[sample.quota_id]
        for resource, amount in sample.used.items():
            assert 0 <= amount <= int((quota.max or quota.min)[resource]), (quota.name, resource)
    # a parent reports its subtree, as the cycle does
    at = samples[0].at
    by_quota = {s.quota_id: s.used for s in samples if s.at == at}
    vision = Quota.objects.get(name="vision")
    children = Quota.objects.filter(parent=vision)
    assert by_quota[vision.pk]["cpu"] == sum(by_quota[c.pk].get("cpu", 0) for c in children)
    assert len({s.used.get("cpu") for s in samples if s.quota_id == vision.pk}) > 10  # it moves
    # once there is history, nothing more is backfilled
    assert history.backfill() == 0
