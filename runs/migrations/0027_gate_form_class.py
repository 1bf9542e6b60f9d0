"""Where a question's form class is, so the process that answers its gate checks the answer
with the class's own clean() (runs/gates/forms.py). Gates asked before read as having none."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0026_ledger_tables_without_autoincrement"),
    ]

    operations = [
        migrations.AddField(
            model_name="gate",
            name="form_class",
            field=models.TextField(blank=True, default=""),
        ),
    ]
