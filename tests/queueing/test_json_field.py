"""queueing.models.fields.JSONField: the columns decoded with orjson give what Django's
``json.loads`` gave, through the ORM's reads of rows and of values."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection

from queueing.models import Workload
from queueing.models.fields import JSONField
from tests.builders import submit

pytestmark = pytest.mark.django_db

DOCUMENTS: list[Any] = [
    {},
    [],
    {"a": 1, "b": [1, 2.5, -3e-7, None, True, False], "c": {"d": 'ü€😀\n"q"'}},
    {"big": 2**63 - 1, "bigger": 2**64 + 5, "huge": 2**70, "neg": -(2**65)},
    {"f": 0.1, "g": 1e300, "digits": 0.12345678901234567890123},
    "text",
    7,
]


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_a_document_decodes_as_json_loads_decodes_it(doc):
    field = Workload._meta.get_field("labels")
    assert isinstance(field, JSONField)
    text = json.dumps(doc)
    decoded = field.from_db_value(text, None, connection)
    assert decoded == json.loads(text)
    assert json.dumps(decoded) == json.dumps(json.loads(text))  # ints stay ints, exactly


def test_what_orjson_refuses_falls_back_to_django():
    field = Workload._meta.get_field("labels")
    assert field.from_db_value('{"x": NaN}', None, connection)["x"] != 0  # NaN, not equal
    assert field.from_db_value("not json", None, connection) == "not json"
    assert field.from_db_value(None, None, connection) is None


def test_rows_and_values_read_back_what_was_written(world):
    labels = {"team": "ü", "n": 2**70, "nested": {"l": [1, 2.5, None]}}
    workload = submit(world, "j")
    Workload.objects.filter(pk=workload.pk).update(labels=labels)
    row = Workload.objects.get(pk=workload.pk)
    assert row.labels == labels
    assert isinstance(row.labels["n"], int)
    value = Workload.objects.filter(pk=workload.pk).values_list("labels", flat=True).get()
    assert value == labels
    assert Workload.objects.filter(labels__team="ü").count() == 1
    assert (
        Workload.objects.filter(pk=workload.pk).values_list("labels__n", flat=True).get() == 2**70
    )
