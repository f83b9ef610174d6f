"""Watch a running `make run` demo for N minutes and measure what tenants are promised
against what then happened: ETA presence, p50 vs p90, the first p90's and p50's coverage of
the actual admission, the median relative p50 error, large ETA moves, "N workloads ahead"
against the true position, millicores printed as cores, and quotas that kept work waiting
under their guaranteed minimum.

Not a benchmark of `make bench` (it needs the demo running): beside `make run`, from the
same checkout (it reads the demo's database), run
`.venv/bin/python -m tests.bench.observe_demo MINUTES OUT.json`. It prints one JSON line.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from collections import defaultdict

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
import django

django.setup()

from queueing.models import CycleRun, Quota, Workload  # noqa: E402

WAITING = ("Pending", "Backoff", "Preempted")
minutes = float(sys.argv[1])
out_path = sys.argv[2]
deadline = time.time() + minutes * 60
first_seen: dict[int, dict] = {}
obs = 0
with_eta = 0
with_reason_no_eta = 0
p50_ne_p90 = 0
eta_obs = 0
flips = 0
prev: dict[int, tuple[float, float]] = {}
min_unused: dict[str, int] = defaultdict(int)
ahead_wrong = 0
ahead_checked = 0
polls = 0
raw_cores = 0
last_cycle = 0
cycles_seen = 0
reasons: set[str] = set()
while time.time() < deadline:
    polls += 1
    now = time.time()
    cyc = CycleRun.objects.order_by("-id").values_list("id", flat=True).first() or 0
    if cyc != last_cycle:
        cycles_seen += 1
        last_cycle = cyc
    rows = list(
        Workload.objects.filter(phase__in=WAITING).values(
            "id",
            "name",
            "quota__name",
            "queue__name",
            "position",
            "eta_p50",
            "eta_p90",
            "reason",
            "total_request",
            "queue_order_at",
            "phase",
        )
    )
    by_queue = defaultdict(list)
    for r in rows:
        by_queue[r["queue__name"]].append(r)
        obs += 1
        reasons.add(r["reason"])
        if re.search(r"\b\d{5,} cpu\b", r["reason"] or ""):
            raw_cores += 1
        if r["eta_p50"] is not None and r["eta_p90"] is not None:
            with_eta += 1
            eta_obs += 1
            p50, p90 = r["eta_p50"].timestamp(), r["eta_p90"].timestamp()
            if abs(p90 - p50) > 0.5:
                p50_ne_p90 += 1
            if r["id"] not in first_seen:
                first_seen[r["id"]] = {"seen": now, "p50": p50, "p90": p90}
            old = prev.get(r["id"])
            if old is not None:
                remaining = max(old[0] - now, 1.0)
                if abs(p50 - old[0]) > 2 * remaining + 5:
                    flips += 1
            prev[r["id"]] = (p50, p90)
        elif r["reason"]:
            with_reason_no_eta += 1
            first_seen.setdefault(r["id"], {"seen": now, "p50": None, "p90": None})
        m = re.search(r"(\d+) workloads? (?:are )?ahead", r["reason"] or "")
        if m and r["position"]:
            ahead_checked += 1
            if int(m.group(1)) != r["position"] - 1:
                ahead_wrong += 1
    # quotas waiting with their guaranteed min unused for a request that fits it
    for q in Quota.objects.filter(parent__isnull=False).values("name", "min", "used"):
        waiting = [r for r in rows if r["quota__name"] == q["name"] and r["phase"] == "Pending"]
        if not waiting:
            continue
        mn, used = q["min"] or {}, q["used"] or {}
        for r in waiting:
            req = r["total_request"] or {}
            if req and all(used.get(k, 0) + v <= mn.get(k, 0) for k, v in req.items()):
                if now - r["queue_order_at"].timestamp() > 60:
                    min_unused[q["name"]] += 1
                break
    time.sleep(3)

# compare first predictions with the actual admission
covered90 = covered50 = n = 0
errs = []
for wid, seen in first_seen.items():
    if seen["p50"] is None:
        continue
    w = Workload.objects.filter(id=wid).values("admitted_at").first()
    if not w or not w["admitted_at"]:
        continue
    actual = w["admitted_at"].timestamp()
    n += 1
    covered90 += actual <= seen["p90"] + 1
    covered50 += actual <= seen["p50"] + 1
    wait = max(actual - seen["seen"], 10.0)
    errs.append(abs(actual - seen["p50"]) / wait)
waits = [
    (w["admitted_at"] - w["queue_order_at"]).total_seconds()
    for w in Workload.objects.filter(admitted_at__isnull=False).values(
        "admitted_at", "queue_order_at"
    )
]
report = {
    "minutes": minutes,
    "polls": polls,
    "cycles_seen": cycles_seen,
    "waiting_observations": obs,
    "eta_presence_pct": round(100 * with_eta / max(obs, 1), 1),
    "eta_or_reason_pct": round(100 * (with_eta + with_reason_no_eta) / max(obs, 1), 1),
    "p50_ne_p90_pct": round(100 * p50_ne_p90 / max(eta_obs, 1), 1),
    "admitted_after_first_eta": n,
    "p90_coverage_pct": round(100 * covered90 / max(n, 1), 1),
    "p50_coverage_pct": round(100 * covered50 / max(n, 1), 1),
    "p50_median_rel_err": round(statistics.median(errs), 3) if errs else None,
    "flips_pct": round(100 * flips / max(eta_obs, 1), 2),
    "ahead_wrong": ahead_wrong,
    "ahead_checked": ahead_checked,
    "millicores_as_cores": raw_cores,
    "min_unused_observations": dict(min_unused),
    "max_wait_s": round(max(waits), 1) if waits else None,
    "distinct_reasons": len(reasons),
    "still_waiting": Workload.objects.filter(phase__in=WAITING).count(),
    "admitted_total": Workload.objects.filter(admitted_at__isnull=False).count(),
}
with open(out_path, "w") as out:
    json.dump({"report": report, "sample_reasons": sorted(r for r in reasons if r)[:60]}, out)
print(json.dumps(report))
