"""The cycle's annotations of waiting workloads as HOT updates (issue 10).

A cycle that forecasts rewrites position, ETA and reason of hundreds of waiting rows in
one statement. With ``position`` in an index (workload_queue_position) every such row
was a new version with an entry in each of the table's indexes; with no index on what
the annotations write, PostgreSQL updates the row in place on its page (a heap-only
tuple) when the page has room, which ``fillfactor`` keeps: new rows fill pages to 70 %,
leaving about one more version of a row (some 1.4 kB) per page. Elsewhere (SQLite) only
the index goes. Reversible: the reverse makes the index again and resets the fillfactor.
"""

from django.db import migrations

FILLFACTOR = 70


def _fillfactor(value: int | None):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        table = schema_editor.quote_name(apps.get_model("queueing", "Workload")._meta.db_table)
        if value is None:
            schema_editor.execute(f"ALTER TABLE {table} RESET (fillfactor)")
        else:
            schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {int(value)})")

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("queueing", "0010_workload_fewer_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="workload",
            name="workload_queue_position",
        ),
        migrations.RunPython(_fillfactor(FILLFACTOR), _fillfactor(None)),
    ]
