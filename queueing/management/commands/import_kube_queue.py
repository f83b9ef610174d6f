"""`python manage.py import_kube_queue [--dry-run]`: kube-queue objects -> tenants, quotas, queues."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from queueing.cluster import get_cluster
from queueing.cluster.base import ClusterError
from queueing.kubequeue import import_kube_queue, read_objects


class Command(BaseCommand):
    help = (
        "Read kube-queue Queues and QueueUnits and Koordinator ElasticQuotas from the cluster "
        "and create or update tenants, quotas and queues. Running it twice changes nothing."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Check and print the plan; write nothing."
        )
        parser.add_argument("--root", default=None, help="The root quota to import under.")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = get_cluster()
        if not hasattr(cluster, "list_objects"):
            raise CommandError(
                "import_kube_queue reads a Kubernetes cluster: set KQ_CLUSTER=kubernetes."
            )
        try:
            objects = read_objects(cluster)
        except ClusterError as exc:
            raise CommandError(f"Could not read the cluster: {exc}") from exc
        report = import_kube_queue(objects, dry_run=options["dry_run"], root_name=options["root"])
        for line in report.lines():
            self.stdout.write(line)
        if report.counts()["error"]:
            raise CommandError(f"{report.counts()['error']} item(s) could not be imported.")
