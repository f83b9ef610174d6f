"""A fresh `make run` (manage.py run_all in an empty var/) serves with DEBUG off: an
unknown URL gets the product's 404 page, never Django's debug page, with the security
headers; and its embedded Redis runs under the restarting supervisor."""

from __future__ import annotations

import shutil

import pytest
import requests

from tests.bench.bench_soak import Product

# Its product brings its own database and Redis (DATABASE_URL and REDIS_URL unset in
# var/): the same in both of CI's passes, run in one (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.db_independent]


def test_a_fresh_make_run_answers_an_unknown_url_with_the_products_404() -> None:
    product = Product()
    try:
        product.start()  # waits until /login/ answers 200
        missing = requests.get(f"{product.base}/no-such-page/", timeout=30)
        procfile = (product.var / "Procfile").read_text()
    finally:
        product.stop()
        shutil.rmtree(product.var, ignore_errors=True)
    assert missing.status_code == 404
    page = missing.text
    assert "<h1>Not found</h1>" in page
    for marker in ("URLconf", "Django tried these URL patterns", "Traceback", "DEBUG"):
        assert marker not in page
    assert "script-src 'self'" in missing.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in missing.headers["Content-Security-Policy"]
    assert "manage.py keep_running --name redis" in procfile
