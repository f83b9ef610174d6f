"""``manage.py simulate``: run the engine over a scenario in virtual time.

A thin wrapper around :func:`queueing.engine.simulator.simulate`; the database is not
touched. ``--json`` prints one JSON object (makespan_s, avg_usage_pct,
min_queue_usage_pct, tta_mean_s per class, ...).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from queueing.engine.scenarios import SCENARIOS
from queueing.engine.simulator import CYCLE_MODES, simulate
from queueing.engine.types import EngineConfig


class Command(BaseCommand):
    help = "Run the admission engine over a scenario in virtual time and report the figures."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scenario", default="kueue-baseline", choices=sorted(SCENARIOS))
        parser.add_argument(
            "--cycle",
            default="interval",
            choices=CYCLE_MODES,
            help="interval: a cycle every --cycle-interval; on-event: a cycle woken by "
            "each arrival and completion after --debounce (beat's --cycle-interval stays "
            "the safety net)",
        )
        parser.add_argument(
            "--cycle-interval",
            type=float,
            default=1.0,
            help="virtual seconds between cycles (default 1.0)",
        )
        parser.add_argument(
            "--debounce-ms",
            type=float,
            # The real cycler's debounce (queueing.wake), so that virtual time matches it.
            default=float(getattr(settings, "KQ_WAKE_DEBOUNCE_MS", 20)),
            help="on-event: milliseconds from an event to the cycle it wakes "
            "(default: KQ_WAKE_DEBOUNCE_MS, 20)",
        )
        parser.add_argument(
            "--fair-share-mode",
            default=EngineConfig().fair_share_mode,
            choices=("instant", "historical", "blended"),
        )
        parser.add_argument(
            "--preempt-grace",
            type=float,
            default=EngineConfig().preempt_grace_s,
            help="seconds: victims expected to finish sooner are not preempted (0 = off)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["cycle_interval"]
        if interval <= 0:
            raise CommandError("--cycle-interval must be positive.")
        if options["debounce_ms"] < 0:
            raise CommandError("--debounce-ms must not be negative.")
        scenario = SCENARIOS[options["scenario"]]()
        config = EngineConfig(
            fair_share_mode=options["fair_share_mode"], preempt_grace_s=options["preempt_grace"]
        )
        result = simulate(
            scenario,
            cycle_interval_s=interval,
            cycle=options["cycle"],
            debounce_s=options["debounce_ms"] / 1000,
            config=config,
        )
        data = result.to_dict()
        if options["json"]:
            self.stdout.write(json.dumps(data))
            return
        self.stdout.write(f"scenario            {data['scenario']}")
        self.stdout.write(f"makespan            {data['makespan_s']} s")
        self.stdout.write(f"average usage       {data['avg_usage_pct']} % of nominal")
        self.stdout.write(f"lowest queue usage  {data['min_queue_usage_pct']} %")
        for klass, tta in data["tta_mean_s"].items():
            self.stdout.write(f"time to admission   {klass:<8} {tta} s")
        self.stdout.write(
            f"cycles              {data['cycles']} ({data['cycle']}, interval "
            f"{data['cycle_interval_s']} s, debounce {data['debounce_s']} s), "
            f"engine mean {data['engine_mean_s']} s, evictions {data['evictions']}, "
            f"wall {data['wall_s']} s"
        )
