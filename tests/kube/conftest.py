from tests.fakekube.fixtures import fake_kube, fake_kube_factory, kube_client  # noqa: F401
