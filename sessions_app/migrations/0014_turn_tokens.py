"""Token columns on turn rows: the provider's usage of each model answer, and when it was written,
filled in for the turns stored before (docs/sessions.md §1.11)."""

import json

from django.db import migrations, models

from agentfiles.usage import turn_token_usage


def fill_tokens(apps, schema_editor):
    Turn = apps.get_model("sessions_app", "Turn")
    rows = Turn.objects.filter(turn_json__contains='"LlmTurn"').select_related("session")
    for row in rows.iterator(chunk_size=500):
        try:
            usage = turn_token_usage(json.loads(row.turn_json))
        except ValueError:
            continue
        if usage is None:
            continue
        row.input_tokens = usage.input_tokens
        row.output_tokens = usage.output_tokens
        row.cached_tokens = usage.cached_tokens
        row.reports_usage = True
        row.recorded_at = row.session.updated_at
        row.save(update_fields=["input_tokens", "output_tokens", "cached_tokens", "reports_usage", "recorded_at"])


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0013_continuation_traceparent"),
    ]

    operations = [
        migrations.AddField(model_name="turn", name="input_tokens", field=models.BigIntegerField(default=0)),
        migrations.AddField(model_name="turn", name="output_tokens", field=models.BigIntegerField(default=0)),
        migrations.AddField(model_name="turn", name="cached_tokens", field=models.BigIntegerField(default=0)),
        migrations.AddField(model_name="turn", name="reports_usage", field=models.BooleanField(default=False)),
        migrations.AddField(model_name="turn", name="recorded_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.AddIndex(
            model_name="turn",
            index=models.Index(
                condition=models.Q(("reports_usage", True)), fields=["recorded_at"], name="turn_usage_recorded"
            ),
        ),
        migrations.RunPython(fill_tokens, migrations.RunPython.noop),
    ]
