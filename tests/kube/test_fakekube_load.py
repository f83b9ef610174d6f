"""`python -m tests.fakekube --load FILE`: the walkthrough's seed (docs/kubernetes.md)
creates every object of the file, Nodes with their allocatable."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.fakekube import FakeKube
from tests.fakekube.__main__ import load

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fake-cluster.yaml"


def test_the_walkthroughs_cluster_loads(fake: FakeKube) -> None:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    for obj in docs:
        load(fake, obj)
    node = fake.store.get("nodes", None, "node-1")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    quotas = {o["metadata"]["name"] for o in fake.store.list("elasticquotas", None)[0]}
    assert quotas == {"research", "team-a", "team-b"}
    assert fake.store.get("queues", "team-a", "training")["spec"]["priority"] == 10
    with pytest.raises(SystemExit, match="does not serve"):
        load(fake, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
