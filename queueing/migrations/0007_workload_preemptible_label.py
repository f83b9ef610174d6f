"""Workload.preemptible: koord-queue's preemptible label, read once at registration.

Live workloads registered before it whose labels already say non-preemptible are
backfilled from their stored labels (the rule of ``queueing.compat.is_preemptible``,
frozen here so a later change of it does not rewrite history).
"""

from django.db import migrations, models
from django.db.models import Q

LABELS = (
    "quota.scheduling.koordinator.sh/preemptible",
    "quota.scheduling.alibabacloud.com/preemptible",
)


def backfill(apps, schema_editor):
    Workload = apps.get_model("queueing", "Workload")
    labelled = Workload.objects.filter(Q(labels__has_key=LABELS[0]) | Q(labels__has_key=LABELS[1]))
    ids = []
    for wid, labels in labelled.values_list("id", "labels").iterator():
        values = [(labels or {}).get(key) for key in LABELS]
        if not ("true" in values or not any(values)):
            ids.append(wid)
    if ids:
        Workload.objects.filter(id__in=ids).update(preemptible=False)


class Migration(migrations.Migration):
    dependencies = [
        ("queueing", "0006_queue_max_execution_and_quota_fair_weight"),
    ]

    operations = [
        migrations.AddField(
            model_name="workload",
            name="preemptible",
            field=models.BooleanField(
                default=True,
                help_text=(
                    'False when its preemptible label says "false" (koord-queue): admitted '
                    "only within its quota's min and never preempted."
                ),
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
