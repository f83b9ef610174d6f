"""Pytest fixtures. Import them into a conftest:

from tests.fakekube.fixtures import fake_kube, fake_kube_factory, kube_client  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from .client import FakeKubeProcess, api_client
from .server import FakeKube

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


@pytest.fixture
def fake_kube_factory() -> Iterator[Callable[..., FakeKube]]:
    """Start fakes with custom settings: `fake = fake_kube_factory(time_scale=0.01)`."""
    started: list[FakeKube] = []

    def make(**settings: Any) -> FakeKube:
        fake = FakeKube(**settings)
        fake.start()
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


@pytest.fixture
def fake_kube(fake_kube_factory: Callable[..., FakeKube]) -> FakeKube:
    """A started fake with fast Jobs (1 s of runtime takes 10 ms) and seed 0."""
    return fake_kube_factory(time_scale=0.01, seed=0)


@pytest.fixture
def kube_client(fake_kube: FakeKube) -> Iterator[ApiClient]:
    """A `kubernetes.client.ApiClient` pointed at `fake_kube`."""
    api = api_client(fake_kube.url)
    yield api
    api.close()


@pytest.fixture
def fake_kube_process() -> Iterator[FakeKubeProcess]:
    """The fake in its own process (for clients in other processes, or to keep the GIL
    free); `.url`, and `.control` for the `/_fake/` endpoints. Same settings as `fake_kube`."""
    with FakeKubeProcess("--time-scale", "0.01", "--seed", "0") as proc:
        yield proc
