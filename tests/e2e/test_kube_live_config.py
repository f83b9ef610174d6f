"""The walkthrough of docs/kubernetes.md ("Trying it without a cluster") as a test: a
fresh `make run` in Kubernetes mode against the fake API server, seeded from
docs/examples/fake-cluster.yaml, shows an ElasticQuota edit through its API without
waiting for a periodic look (KQ_KUBE_CONFIG_SYNC_S is an hour here: only the watch
process can make the edit arrive), refuses to edit that quota itself, and writes a quota
made here to the cluster as an ElasticQuota of its own."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.bench.bench_soak import Product
from tests.fakekube import FakeKube, write_kubeconfig
from tests.fakekube.__main__ import load
from tests.services import wait_until

# Its product brings its own database and Redis (DATABASE_URL and REDIS_URL unset in
# var/): the same in both of CI's passes, run in one (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.db_independent]

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fake-cluster.yaml"
EQ = "elasticquotas"


def test_an_elastic_quota_edit_reaches_a_fresh_make_run_through_the_watch() -> None:
    with FakeKube() as fake:
        for obj in yaml.safe_load_all(EXAMPLE.read_text()):
            if obj:
                load(fake, obj)
        product = Product()
        kubeconfig = write_kubeconfig(product.var / "kubeconfig", fake.url)
        product.env.update(
            KQ_CLUSTER="kubernetes",
            KUBECONFIG=str(kubeconfig),
            KQ_NAMESPACES="team-a,team-b",
            KQ_KUBE_LIVE_CONFIG="1",
            KQ_KUBE_CONFIG_SYNC_S="3600",
            KQ_DEMO_TRICKLE="0",
            DJANGO_SUPERUSER_PASSWORD="e2e-walkthrough",
        )
        try:
            product.start()
            product.manage(
                "createsuperuser",
                "--noinput",
                "--username",
                "admin",
                "--email",
                "admin@example.com",
            )
            token = product.manage("create_token", "admin").splitlines()[-1]
            api = requests.Session()
            api.headers["Authorization"] = f"Token {token}"

            def team_a() -> dict[str, Any]:
                answer = api.get(f"{product.base}/api/v1/quotas/team-a/", timeout=10)
                return answer.json() if answer.status_code == 200 else {}

            # The first sync imports the tree (its first look is not held back).
            wait_until(lambda: team_a().get("source") == "kubernetes", timeout=120, interval=0.2)
            assert team_a()["max"]["cpu"] == "24"
            # An edit in the cluster: shown by the API, long before an hourly look.
            obj = fake.store.get(EQ, "team-a", "team-a")
            fake.store.update(
                EQ, "team-a", "team-a", {**obj, "spec": {**obj["spec"], "max": {"cpu": "30"}}}
            )
            wait_until(lambda: team_a()["max"].get("cpu") == "30", timeout=60, interval=0.1)
            shown = team_a()
            assert "memory" not in shown["max"]  # the edit replaced max, as it said
            # The product refuses to edit it: the object is the place.
            refused = api.patch(
                f"{product.base}/api/v1/quotas/team-a/",
                json={"max": {"cpu": "8"}, "version": shown["version"]},
                timeout=10,
            )
            assert refused.status_code == 409, refused.text
            assert "edit that object instead" in refused.text
            # A quota made here becomes an ElasticQuota of the product's own.
            made = api.post(
                f"{product.base}/api/v1/quotas/",
                json={
                    "name": "interns",
                    "tenant": "research",
                    "parent": "research",
                    "min": {},
                    "max": {"cpu": "4"},
                    "namespaces": [],
                },
                timeout=10,
            )
            assert made.status_code == 201, made.text

            def written() -> dict[str, Any] | None:
                try:
                    return fake.store.get(EQ, "koord-queue", "interns")
                except Exception:
                    return None

            wait_until(lambda: written() is not None, timeout=60, interval=0.2)
            labels = written()["metadata"]["labels"]  # type: ignore[index]
            assert labels["app.kubernetes.io/managed-by"] == "koord-queue"
            assert labels["quota.scheduling.koordinator.sh/parent"] == "research"
            assert team_a()["max"] == {"cpu": "30"}  # and nothing came back as configuration
            assert (
                api.get(f"{product.base}/api/v1/quotas/interns/", timeout=10).json()["source"]
                == "here"
            )
        finally:
            product.stop()
            shutil.rmtree(product.var, ignore_errors=True)
