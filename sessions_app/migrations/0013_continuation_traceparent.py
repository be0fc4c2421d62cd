from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0012_event_numbering")]

    operations = [
        migrations.AddField(
            model_name="continuation",
            name="traceparent",
            field=models.TextField(blank=True, default=""),
        ),
    ]
