"""The what-if preview: the engine on a modified snapshot, validated like a save, nothing saved."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from queueing import actions, whatif
from queueing.admission import tick
from queueing.choices import Phase
from queueing.models import AuditEvent, Quota, Workload
from tests.builders import SYSTEM, submit

pytestmark = pytest.mark.django_db


def snapshot_of_db() -> tuple:
    return (
        list(Quota.objects.order_by("id").values_list("name", "min", "max", "version")),
        list(Workload.objects.order_by("id").values_list("phase", "position")),
        AuditEvent.objects.count(),
    )


def test_raising_a_max_shows_who_would_be_admitted_and_saves_nothing(world):
    for i in range(6):
        submit(world, f"w{i}", cpu="4", runtime=600)
    tick(cluster=world.cluster, now=world.clock())  # 4 admitted at max 16 cpu, 2 wait
    # A third node and a higher max let the two waiting ones in.
    actions.update_quota(
        SYSTEM, world.root, min={"cpu": "24", "memory": "1Ti"}, max={"cpu": "24", "memory": "1Ti"}
    )
    from tests.builders import node

    node("node-3")
    before = snapshot_of_db()
    preview = whatif.preview_quota_change(
        world.quota, {"max": {"cpu": "24"}}, now=world.clock()
    ).as_dict()
    assert snapshot_of_db() == before
    [quota] = [q for q in preview["quotas"] if q["name"] == world.quota.name]
    assert quota["changed"]
    assert quota["before"]["max"] == {"cpu": "16"}
    assert quota["after"]["max"] == {"cpu": "24"}
    waiting = {w["name"]: w for w in preview["workloads"]}
    assert set(waiting) == {"w4", "w5"}
    assert all(w["after"]["admitted"] and not w["before"]["admitted"] for w in waiting.values())
    assert preview["summary"]["admitted_after"] == preview["summary"]["admitted_before"] + 2


def test_a_preview_refuses_what_a_save_would_refuse(world):
    before = snapshot_of_db()
    with pytest.raises(ValidationError) as info:
        whatif.preview_quota_change(world.quota, {"min": {"cpu": "40"}, "max": {"cpu": "20"}})
    assert "min cpu (40) is more than max cpu (20)" in str(info.value)
    assert snapshot_of_db() == before


def test_previewing_a_new_quota_that_keeps_its_min(world):
    for i in range(4):
        submit(world, f"w{i}", cpu="4", runtime=600)
    tick(cluster=world.cluster, now=world.clock())
    assert Workload.objects.filter(phase=Phase.ADMITTED).count() == 4
    before = snapshot_of_db()
    preview = whatif.preview_quota_create(
        name="reserved",
        tenant=world.tenant,
        parent=world.root,
        min={"cpu": "8"},
        max={"cpu": "8"},
        allow_lent=False,
        now=world.clock(),
    ).as_dict()
    assert snapshot_of_db() == before
    names = {q["name"]: q for q in preview["quotas"]}
    assert names["reserved"]["after"]["min"] == {"cpu": "8"}
    assert names["reserved"]["before"]["min"] == {}
    with pytest.raises(ValidationError):
        whatif.preview_quota_create(
            name="reserved",
            tenant=world.tenant,
            parent=world.root,
            min={"cpu": "99"},
            max={"cpu": "8"},
        )
