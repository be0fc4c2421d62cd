"""Turns as rows: a session's document becomes its header (on the session) and one row per turn."""

import json

import django.db.models.deletion
from django.db import migrations, models


def split_documents(apps, schema_editor):
    Session = apps.get_model("sessions_app", "Session")
    Turn = apps.get_model("sessions_app", "Turn")
    for session in Session.objects.all().iterator():
        document = json.loads(session.document_json)
        turns = document.get("turns") or []
        header = {key: (None if key == "turns" else value) for key, value in document.items()}
        session.header_json = json.dumps(header, ensure_ascii=True)
        session.turn_count = len(turns)
        session.save(update_fields=["header_json", "turn_count"])
        Turn.objects.bulk_create(
            Turn(
                session_id=session.pk,
                position=position,
                version=session.version,
                turn_json=json.dumps(turn, ensure_ascii=True),
            )
            for position, turn in enumerate(reversed(turns))
        )


def join_documents(apps, schema_editor):
    Session = apps.get_model("sessions_app", "Session")
    Turn = apps.get_model("sessions_app", "Turn")
    for session in Session.objects.all().iterator():
        document = json.loads(session.header_json)
        rows = Turn.objects.filter(session_id=session.pk).order_by("-position").values_list("turn_json", flat=True)
        document["turns"] = [json.loads(text) for text in rows]
        session.document_json = json.dumps(document, ensure_ascii=True)
        session.save(update_fields=["document_json"])


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0003_last_mail_seq"),
    ]

    operations = [
        migrations.AddField(
            model_name="session", name="header_json", field=models.TextField(default="{}"), preserve_default=False
        ),
        migrations.AddField(model_name="session", name="turn_count", field=models.IntegerField(default=0)),
        migrations.CreateModel(
            name="Turn",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("position", models.IntegerField()),
                ("version", models.IntegerField()),
                ("turn_json", models.TextField()),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="turn_rows", to="sessions_app.session"
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["session", "version"], name="sessions_ap_session_5de394_idx")],
                "constraints": [
                    models.UniqueConstraint(fields=("session", "position"), name="turn_position_per_session")
                ],
            },
        ),
        migrations.RunPython(split_documents, join_documents),
        migrations.RemoveField(model_name="session", name="document_json"),
    ]
