"""Prometheus metrics, read from the database at scrape time.

The cycle runs in Celery workers and the pages in ASGI processes, possibly on several
hosts; the database is what they share, so the collector derives every metric from it:
gauges from current state, histograms and counters from rows that only grow (admission
waits, cycle runs, MetricCounter).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from django.db.models import Count, F, Model, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from queueing.choices import Phase
from queueing.models import CycleRun, MetricCounter, Queue, Quota, Workload

CYCLE_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
WAIT_BUCKETS_S = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)


def increment(name: str, label: str = "", by: int = 1) -> None:
    """Add to a shared counter (for example an API error by status)."""
    updated = MetricCounter.objects.filter(name=name, label=label).update(value=F("value") + by)
    if not updated:
        counter, created = MetricCounter.objects.get_or_create(name=name, label=label)
        if not created:
            MetricCounter.objects.filter(pk=counter.pk).update(value=F("value") + by)
        else:
            MetricCounter.objects.filter(pk=counter.pk).update(value=by)


def _histogram(
    name: str,
    doc: str,
    field: str,
    model: type[Model],
    buckets: Sequence[float],
    scale: float,
    **filters: object,
) -> HistogramMetricFamily:
    aggregates = {
        f"le_{i}": Count("id", filter=Q(**{f"{field}__lte": b})) for i, b in enumerate(buckets)
    }
    row = model._default_manager.filter(**filters).aggregate(
        total=Count("id"), sum=Sum(field), **aggregates
    )
    histogram = HistogramMetricFamily(name, doc)
    histogram.add_metric(
        [],
        [(str(b / scale), float(row[f"le_{i}"])) for i, b in enumerate(buckets)]
        + [("+Inf", float(row["total"]))],
        sum_value=float(row["sum"] or 0.0) / scale,
    )
    return histogram


class KoordQueueCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        workloads = GaugeMetricFamily(
            "koordqueue_workloads",
            "Workloads by queue and phase.",
            labels=["tenant", "queue", "phase"],
        )
        names = dict(Queue.objects.values_list("id", "name"))
        tenants = dict(Queue.objects.values_list("id", "tenant__name"))
        for row in (
            Workload.objects.exclude(phase__in=[Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED])
            .values("queue_id", "phase")
            .annotate(n=Count("id"))
        ):
            workloads.add_metric(
                [tenants.get(row["queue_id"], ""), names.get(row["queue_id"], ""), row["phase"]],
                row["n"],
            )
        yield workloads

        finished = CounterMetricFamily(
            "koordqueue_workloads_finished",
            "Workloads that reached an end phase.",
            labels=["queue", "phase"],
        )
        for row in (
            Workload.objects.filter(phase__in=[Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED])
            .values("queue_id", "phase")
            .annotate(n=Count("id"))
        ):
            finished.add_metric([names.get(row["queue_id"], ""), row["phase"]], row["n"])
        yield finished

        runtime = GaugeMetricFamily(
            "koordqueue_quota_runtime",
            "Runtime quota per quota and resource (canonical units).",
            labels=["quota", "resource"],
        )
        used = GaugeMetricFamily(
            "koordqueue_quota_used",
            "Usage per quota and resource (canonical units).",
            labels=["quota", "resource"],
        )
        minimum = GaugeMetricFamily(
            "koordqueue_quota_min", "Guaranteed amount per quota.", labels=["quota", "resource"]
        )
        maximum = GaugeMetricFamily(
            "koordqueue_quota_max", "Ceiling per quota.", labels=["quota", "resource"]
        )
        for name, *maps in Quota.objects.values_list("name", "runtime", "used", "min", "max"):
            for family, values in zip((runtime, used, minimum, maximum), maps, strict=True):
                for resource, amount in sorted((values or {}).items()):
                    family.add_metric([name, resource], float(amount))
        yield from (runtime, used, minimum, maximum)

        yield _histogram(
            "koordqueue_admission_wait_seconds",
            "Time from queue order to admission.",
            "wait_s",
            Workload,
            WAIT_BUCKETS_S,
            1.0,
            wait_s__isnull=False,
        )
        yield _histogram(
            "koordqueue_cycle_duration_seconds",
            "Duration of admission cycles.",
            "duration_ms",
            CycleRun,
            CYCLE_BUCKETS_MS,
            1000.0,
        )
        cycles = CycleRun.objects.aggregate(
            admitted=Sum("admitted"), preempted=Sum("preempted"), conflicts=Sum("conflicts")
        )
        for key, doc in (
            ("admitted", "Admissions made by cycles."),
            ("preempted", "Preemptions made by cycles."),
            ("conflicts", "Decisions dropped because the workload changed meanwhile."),
        ):
            counter = CounterMetricFamily(f"koordqueue_cycle_{key}", doc)
            counter.add_metric([], float(cycles[key] or 0))
            yield counter

        errors = CounterMetricFamily(
            "koordqueue_errors",
            "Errors by kind (API responses, cluster calls).",
            labels=["kind", "detail"],
        )
        for name, label, value in MetricCounter.objects.values_list("name", "label", "value"):
            errors.add_metric([name, label], float(value))
        yield errors
