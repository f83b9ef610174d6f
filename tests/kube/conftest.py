from tests.fakekube.fixtures import (  # noqa: F401
    fake_kube,
    fake_kube_factory,
    fake_kube_process,
    kube_client,
)
