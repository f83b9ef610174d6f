"""The Celery application: workers run the sync + admission cycle that beat schedules."""

from __future__ import annotations

import os
import sys

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

try:
    from django.conf import settings

    _ = settings.INSTALLED_APPS  # evaluates the settings now, to fail with one sentence
except Exception as exc:
    from django.core.exceptions import ImproperlyConfigured

    if isinstance(exc, ImproperlyConfigured):
        print(f"Koord-Queue cannot start: {exc}", file=sys.stderr)
        sys.exit(2)
    raise

app = Celery("koord_queue")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["queueing"])
# Woken cycles go to a queue of their own, consumed by the cycle worker (run_all's
# "cycler", a solo pool: one long-lived process keeps its state between tasks).
app.conf.task_routes = {"queueing.react": {"queue": settings.KQ_CYCLE_QUEUE}}

app.conf.beat_schedule = {
    "tick": {
        "task": "queueing.tick",
        "schedule": settings.KQ_CYCLE_INTERVAL_S,
        # A tick nobody picked up in time is useless: the next one is on its way.
        "options": {"expires": max(settings.KQ_CYCLE_INTERVAL_S * 2, 2.0)},
    },
    "demo-trickle": {
        "task": "queueing.demo_trickle",
        "schedule": 5.0,
        "options": {"expires": 10.0},
    },
}
if not settings.KQ_DEMO_TRICKLE:
    del app.conf.beat_schedule["demo-trickle"]
