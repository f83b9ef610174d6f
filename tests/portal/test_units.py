"""One table of cases through every formatter of quantities for people: the template
filter (pages, previews, audit lines), the JS twin (charts and anything drawn in the
browser, run here by node) and kq's own copy (the command line imports nothing of the
server). Page, browser and terminal therefore always show the same text."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from django.template import Context, Template

from kq import units as kq_units
from portal import units
from tests.services import ROOT

CASES = json.loads((Path(__file__).parent / "quantity_cases.json").read_text())


@pytest.mark.parametrize(("resource", "amount", "text"), CASES)
def test_the_template_filter(resource, amount, text):
    rendered = Template("{% load kq %}{{ a|quantity:r }}").render(
        Context({"a": amount, "r": resource})
    )
    assert rendered == text
    assert units.human(resource, amount) == text


@pytest.mark.parametrize(("resource", "amount", "text"), CASES)
def test_kq_says_the_same(resource, amount, text):
    assert kq_units.human(resource, amount) == text


def test_the_js_formatter_agrees_on_every_case():
    node = shutil.which("node")
    assert node, "node is needed to run static/js/quantity.js"
    script = (
        "const q = require(process.argv[1]);"
        "const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "process.stdout.write(JSON.stringify(cases.map(c => q.quantity(c[0], c[1]))));"
    )
    done = subprocess.run(
        [node, "-e", script, str(ROOT / "static" / "js" / "quantity.js")],
        input=json.dumps(CASES), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == [text for _, _, text in CASES]


def test_resource_maps_and_values_that_are_not_amounts():
    assert units.describe({"memory": 9835802968, "cpu": 500, "nvidia.com/gpu": 2}) == (
        "cpu 500m, memory 9.16Gi, nvidia.com/gpu 2"
    )
    assert units.describe({}) == "nothing"
    assert units.human_or_text("memory", "64Gi") == "64Gi"  # already a quantity
    assert units.human_or_text("cpu", None) == "—"
    assert units.human_or_text("cpu", 1499.5) == "1.5"  # a decayed (float) amount
    assert kq_units.human_value("memory", "9835802968") == "9.16Gi"  # as the API spells it
    assert kq_units.human_value("cpu", "32228m") == "32.2"
