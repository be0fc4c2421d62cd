from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0011_idempotency_keys")]

    operations = [
        migrations.AddField(
            model_name="continuation",
            name="traceparent",
            field=models.TextField(blank=True, default=""),
        ),
    ]
