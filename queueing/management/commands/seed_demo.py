from typing import Any

from django.core.management.base import BaseCommand

from queueing import demo


class Command(BaseCommand):
    help = "Create the demo tenants, quota tree, queues, nodes and logins (once)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--jobs", type=int, default=0, help="Also submit this many demo jobs.")

    def handle(self, *args: Any, **options: Any) -> None:
        logins = demo.seed()
        if logins is None:
            self.stdout.write("The demo is already seeded; logins are in var/demo-logins.json.")
            logins = demo.saved_logins()
        else:
            self.stdout.write(self.style.SUCCESS("Seeded the demo."))
        for login in logins:
            self.stdout.write(
                f"  {login.username:<6} {login.password:<14} {login.role} ({login.tenant})"
            )
        if options["jobs"]:
            submitted = 0
            while submitted < options["jobs"]:
                submitted += demo.trickle(count=min(10, options["jobs"] - submitted)) or 1
            self.stdout.write(f"Submitted {options['jobs']} demo jobs.")
