"""`python manage.py webhook_cert [--apply]`: TLS for the admission webhook without
cert-manager: a CA of its own and a certificate for the webhook's Service."""

from __future__ import annotations

from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError

from queueing.cluster import get_cluster
from queueing.cluster.base import ClusterError
from queueing.webhookcert import issue, service_names, tls_secret


class Command(BaseCommand):
    help = (
        "Issue a certificate for the admission webhook's Service (a CA of its own). Prints "
        "the TLS Secret and the caBundle; with --apply, writes the Secret and sets the "
        "caBundle of the MutatingWebhookConfiguration (run it with an installer's rights)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--namespace", default="koord-queue")
        parser.add_argument("--service", default="koord-queue-webhook")
        parser.add_argument("--secret", default="koord-queue-webhook-tls")
        parser.add_argument("--configuration", default="koord-queue")
        parser.add_argument("--days", type=int, default=3650)
        parser.add_argument("--apply", action="store_true", help="Write them to the cluster.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["days"] < 1:
            raise CommandError("--days must be at least 1.")
        cert = issue(service_names(options["service"], options["namespace"]), days=options["days"])
        secret = tls_secret(options["secret"], options["namespace"], cert)
        if not options["apply"]:
            self.stdout.write(yaml.safe_dump(secret, sort_keys=False).rstrip())
            self.stdout.write(f"# caBundle: {cert.ca_bundle}")
            return
        cluster = get_cluster()
        rest = getattr(cluster, "rest", None)
        if rest is None:
            raise CommandError("--apply writes to Kubernetes: set KQ_CLUSTER=kubernetes.")
        from queueing.cluster.kubernetes.install import put_secret, set_ca_bundle

        try:
            done = put_secret(rest, secret)
            hooks = set_ca_bundle(rest, options["configuration"], cert.ca_bundle)
        except ClusterError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Secret {options['namespace']}/{options['secret']} {done}; caBundle set on "
            f"{hooks} webhook(s) of {options['configuration']}. Restart the webhook pods to "
            "load the new certificate."
        )
