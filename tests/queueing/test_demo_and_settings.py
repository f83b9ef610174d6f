from __future__ import annotations

import os
import subprocess

import pytest
from django.core.management import call_command

from queueing import demo
from queueing.choices import Policy
from queueing.models import Queue, Quota, SimNode, Tenant, Workload
from tests.services import PYTHON, ROOT


@pytest.mark.django_db
def test_seed_demo_builds_the_demo_world_once(tmp_path, settings, capsys):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo")
    assert Tenant.objects.count() == 3
    assert SimNode.objects.count() >= 20
    assert {"cpu", "memory", "nvidia.com/gpu"} <= {
        r for n in SimNode.objects.all() for r in n.allocatable
    }
    assert Quota.objects.get(name="cluster").parent is None
    assert set(Queue.objects.values_list("policy", flat=True)) == {p.value for p in Policy}
    logins = demo.saved_logins()
    assert {login.username for login in logins} == {"admin", "ada", "noor", "sam"}
    out = capsys.readouterr().out
    assert all(login.password in out for login in logins)
    call_command("seed_demo")  # idempotent
    assert Tenant.objects.count() == 3


@pytest.mark.django_db
def test_the_trickle_submits_jobs_of_several_sizes(settings, tmp_path):
    import random

    settings.VAR_DIR = tmp_path
    demo.seed()
    from queueing.cluster import set_cluster
    from queueing.cluster.simulated import SimulatedCluster

    set_cluster(SimulatedCluster())
    rng = random.Random(3)
    for _ in range(10):
        demo.trickle(rng, count=3)
    sizes = {w.total_request.get("cpu") for w in Workload.objects.all()}
    assert Workload.objects.count() == 30
    assert len(sizes) >= 3
    # Runtimes vary around their estimates: each simulated job runs 40-100 % of the
    # runtime it declares, not all the same share of it.
    from queueing.models import SimJob

    declared = dict(Workload.objects.values_list("name", "expected_runtime_s"))
    shares = [job.runtime_s / declared[job.name] for job in SimJob.objects.all()]
    assert len(shares) == 30
    assert all(0.4 <= share <= 1.0 for share in shares)
    assert max(shares) - min(shares) > 0.2


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "KQ_TLS")
    }
    environment.update(env)
    return subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "sentence"),
    [
        ({"KQ_TLS": "true"}, "SECRET_KEY must be set when KQ_TLS is on (a deployment)."),
        ({"KQ_CLUSTER": "mesos"}, "KQ_CLUSTER must be one of simulated, kubernetes, not 'mesos'."),
        ({"DATABASE_URL": "mysql://x@y/z"}, "DATABASE_URL must point at PostgreSQL or SQLite."),
        ({"KQ_CYCLE_INTERVAL_S": "soon"}, "KQ_CYCLE_INTERVAL_S must be a number, not 'soon'."),
        ({"REDIS_URL": "localhost:6379"}, "REDIS_URL must start with redis://"),
        ({"KQ_BACKFILL": "sometimes"}, "KQ_BACKFILL must be true or false, not 'sometimes'."),
        (
            {"KQ_FORECASTER_ETA_BUDGET_S": "0"},
            "KQ_FORECASTER_ETA_BUDGET_S must be at least 0.01, not 0.0.",
        ),
        (
            {"KQ_GC_THRESHOLD": "700,ten"},
            "KQ_GC_THRESHOLD must be one to three positive integers separated by commas "
            "(gc.set_threshold's), not '700,ten'.",
        ),
    ],
)
def test_a_misconfiguration_stops_start_up_with_one_sentence(env, sentence):
    result = run_manage("check", **env)
    assert result.returncode == 2
    assert sentence in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.django_db
def test_the_trickle_sends_a_job_beyond_its_quotas_max_only_now_and_then(
    settings, tmp_path, monkeypatch
):
    import random

    from queueing.cluster import set_cluster
    from queueing.cluster.simulated import SimulatedCluster

    settings.VAR_DIR = tmp_path
    demo.seed()
    set_cluster(SimulatedCluster())
    vision_dev = Quota.objects.get(name="vision-dev")
    assert not demo._fits_max(vision_dev, 8, {"cpu": "16"})  # 128 cpu > its 120-cpu max
    assert demo._fits_max(vision_dev, 4, {"cpu": "8"})
    # Only large jobs, as many as the waiting cap allows.
    large = next(shape for shape in demo.SHAPES if shape[0] == "large")
    monkeypatch.setattr(demo, "SHAPES", [large])
    rng = random.Random(7)
    while demo.trickle(rng, count=10):
        pass
    jobs = list(Workload.objects.values_list("quota__name", flat=True))
    assert len(jobs) >= demo.MAX_WAITING
    never = jobs.count("vision-dev")
    # Without the redirect a quarter (one CPU quota in four) would go there.
    assert 1 <= never <= len(jobs) * 0.15, (never, len(jobs))


@pytest.mark.django_db
def test_the_trickle_sends_a_wave_to_one_tenant_at_a_time(settings, tmp_path):
    import random

    from queueing.cluster import set_cluster
    from queueing.cluster.simulated import SimulatedCluster

    settings.VAR_DIR = tmp_path
    demo.seed()
    set_cluster(SimulatedCluster())
    period = demo.WAVE_PERIOD_S
    start = 1_800_000_000 - 1_800_000_000 % period  # a period's start
    # Between waves: the steady 1-3 jobs.
    calm = random.Random(5)
    quiet = [demo.trickle(calm, at=start + demo.WAVE_S + 10) for _ in range(20)]
    assert all(0 <= n <= 3 for n in quiet), quiet
    # In a wave: WAVE_EXTRA (1-2) more, into that tenant's quotas.
    wave = demo.wave_quotas(start + 5)
    assert wave in demo.WAVE_TENANTS
    before = set(Workload.objects.values_list("id", flat=True))
    busy = random.Random(5)
    loud = [demo.trickle(busy, at=start + 5) for _ in range(20)]
    assert all(n <= 3 + demo.WAVE_EXTRA[1] for n in loud), loud
    assert sum(loud) / len(loud) >= sum(quiet) / len(quiet) + demo.WAVE_EXTRA[0], (loud, quiet)
    new = Workload.objects.exclude(id__in=before)
    into_wave = new.filter(quota__name__in=wave).count()
    calm_into_wave = Workload.objects.filter(id__in=before, quota__name__in=wave).count()
    # Between waves these 2 of the 6 quotas get about a third of the jobs; in a wave, more.
    # (the same number of calls: at least one more job a call went into them)
    assert into_wave >= calm_into_wave + len(loud), (into_wave, calm_into_wave)
    # The next period's wave belongs to the next tenant.
    assert demo.wave_quotas(start + period + 5) != wave


@pytest.mark.django_db
def test_the_products_postgresql_connections_compile_no_statement_unless_asked():
    """PostgreSQL's JIT is off on the product's connections (KQ_DB_JIT): on a table whose
    statistics lag a burst, a short read by index was estimated past jit_above_cost and
    spent most of its time compiling. KQ_DB_JIT=1 gives the server's own setting."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's setting")
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone() == ("off",)
        cursor.execute("SELECT boot_val FROM pg_settings WHERE name = 'jit'")
        (server,) = cursor.fetchone()
    show = "from django.db import connection; c = connection.cursor(); c.execute('SHOW jit'); print(c.fetchone()[0])"
    asked = run_manage("shell", "--no-imports", "-c", show, KQ_DB_JIT="1")
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.strip() == server


@pytest.mark.parametrize("on", [True, False])
def test_backfill_reaches_the_engine_from_its_setting(settings, on):
    from queueing.state.snapshot import engine_config

    settings.KQ_BACKFILL = on
    assert engine_config().backfill is on
