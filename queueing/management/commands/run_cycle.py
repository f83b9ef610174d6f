import json
from typing import Any

from django.core.management.base import BaseCommand

from queueing.admission import tick


class Command(BaseCommand):
    help = "Run one sync + admission cycle now and print a one-line JSON summary."

    def handle(self, *args: Any, **options: Any) -> None:
        summary = tick()
        self.stdout.write(json.dumps(summary.as_dict(), sort_keys=False))
