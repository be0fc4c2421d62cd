"""The seq of each session's newest mail on the session row (filled from the mail already stored)."""

from django.db import migrations, models
from django.db.models import Max


def fill_last_mail_seq(apps, schema_editor):
    Session = apps.get_model("sessions_app", "Session")
    MailEnvelope = apps.get_model("sessions_app", "MailEnvelope")
    newest = MailEnvelope.objects.values("session_id").annotate(last=Max("seq"))
    for row in newest:
        Session.objects.filter(pk=row["session_id"]).update(last_mail_seq=row["last"])


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0002_mailbox"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="last_mail_seq",
            field=models.IntegerField(default=0),
        ),
        migrations.RunPython(fill_last_mail_seq, migrations.RunPython.noop),
    ]
