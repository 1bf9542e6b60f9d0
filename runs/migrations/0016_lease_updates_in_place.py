"""The lease loses its index on expires_at (issue 28): every stage takes and gives back its
run's lease, and with no indexed column moving PostgreSQL updates the row in place (HOT)
instead of adding index entries each time. The sweeper's query starts from the active runs
(run_status_idx) and joins their leases by key."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0015_run_severity"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="lease",
            name="lease_expiry_idx",
        ),
    ]
