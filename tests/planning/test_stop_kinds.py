"""Stop kinds are short codes (replay.StopKind) with their words as a label: a plan line and
the group fingerprint carry the code, people read the words, and plans stored when the kind
was its words (migration 0021) group with plans stored since.

Runs are executed in this process (tests/support/plans.py) and their plans stored the way the
worker's plan job would."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from runs.ledger.maintenance import maintenance
from runs.models import Effect, Run, StoredPlan
from runs.planning import stored_plans, triage
from runs.planning.grouping import group_fingerprint
from runs.planning.replay import StopKind, stop_label
from tests.support.plans import stopped_with_plan
from tests.support.web import client_as

pytestmark = pytest.mark.django_db

kinds = importlib.import_module("runs.migrations.0021_stop_kind_codes")
OLD_WORDS = "the effect ledger row disagrees with its events"


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Stages run inside the test's transaction: a heartbeat on its own connection must not
    # fire meanwhile (on SQLite it would wait on the test's write lock).
    settings.RESUMER_LEASE_TTL = 120


def forged_charge() -> Run:
    """A run whose charge's outcome is unknown, its effect row then rewritten behind the
    ledger's back: the plan blocks the call, its kind "ledger-disagrees"."""
    run = stopped_with_plan({"timeout": "publish/promote-charge/after"})
    with maintenance():
        Effect.objects.filter(run=run, call_id="promote-charge").update(
            status=Effect.Status.CONFIRMED, external_id="ch-forged"
        )
    stored_plans.refresh(run)
    return run


def charge_line(run: Run) -> dict:
    data = StoredPlan.objects.values_list("data", flat=True).get(run=run)
    return next(line for line in data["effects"] if line["call_id"] == "promote-charge")


def stored_as_before_codes(run: Run) -> None:
    """Rewrite the run's stored plan as the planner stored it when the kind was its words:
    the words on the line, and the group fingerprint hashed with them."""
    stored = StoredPlan.objects.get(run=run)
    data = stored.data
    for line in data["effects"]:
        if line["kind"] == StopKind.LEDGER_DISAGREES:
            line["kind"] = OLD_WORDS
    StoredPlan.objects.filter(pk=stored.pk).update(data=data, shape=group_fingerprint(data))


def test_a_blocked_line_carries_the_kinds_code_and_people_read_its_words(facts):
    run = forged_charge()

    assert charge_line(run)["kind"] == "ledger-disagrees"
    assert stop_label(charge_line(run)["kind"]) == OLD_WORDS
    (group,) = triage.groups().groups
    assert f"publish/promote-charge ({OLD_WORDS})" in group.summary


def test_the_group_page_shows_a_blockers_words_not_its_code(facts):
    run = forged_charge()
    fingerprint = StoredPlan.objects.values_list("shape", flat=True).get(run=run)

    html = client_as("operator").get(f"/runs/groups/{fingerprint}/").content.decode()

    assert f"(confirmed): {OLD_WORDS}</li>" in html
    assert "ledger-disagrees" not in html


def test_plans_stored_with_the_kinds_words_group_with_new_ones_after_the_migration(facts):
    before, after = forged_charge(), forged_charge()
    stored_as_before_codes(before)
    assert len(triage.groups().groups) == 2  # the words hashed apart from the code

    kinds.codes(apps, None)

    (group,) = triage.groups().groups
    assert group.count == 2
    assert charge_line(before)["kind"] == "ledger-disagrees"
    assert StoredPlan.objects.get(run=before).shape == StoredPlan.objects.get(run=after).shape


def test_the_migration_leaves_plans_stored_with_codes_alone(facts):
    run = forged_charge()
    row = StoredPlan.objects.values("data", "shape").get(run=run)

    kinds.codes(apps, None)

    assert StoredPlan.objects.values("data", "shape").get(run=run) == row


def test_the_migration_reversed_gives_the_words_back(facts):
    run = forged_charge()
    stored_as_before_codes(run)
    old = StoredPlan.objects.values("data", "shape").get(run=run)
    kinds.codes(apps, None)

    kinds.words(apps, None)

    assert StoredPlan.objects.values("data", "shape").get(run=run) == old
