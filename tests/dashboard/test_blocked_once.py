"""A blocked run, said once (issue 48, point 3): one line per blocker, on the run page and on
the plan page, pointing at the effect's own page (not the admin); the effect page says the
money at stake where it is read first, not inside the collapsed request."""

from __future__ import annotations

import re

import pytest

from runs.models import Effect
from runs.planning import stored_plans
from tests.support.plans import charge_unknown
from tests.support.web import client_as

pytestmark = pytest.mark.django_db


@pytest.fixture
def blocked(facts) -> Effect:
    run = charge_unknown()
    stored_plans.refresh(run)
    return Effect.objects.get(run=run, call_id="promote-charge")


def blockers_of(html: str) -> list[str]:
    return re.findall(r'<li class="blocker">(.*?)</li>', html, re.S)


@pytest.mark.parametrize("page", ["", "plan/"])
def test_each_blocker_is_one_line_pointing_at_its_effect_page(blocked, page):
    html = client_as("operator").get(f"/runs/run-{blocked.run_id}/{page}").content.decode()

    (line,) = blockers_of(html)
    assert "charge_card (promote-charge) is NEVER" in line
    assert f'href="/runs/run-{blocked.run_id}/effects/{blocked.pk}/"' in line
    assert "a supervisor settles it there" in line
    assert "(admin)" not in html and "resolve it in the ledger" not in html


def test_a_supervisor_is_offered_to_settle_it_there(blocked):
    html = client_as("supervisor").get(f"/runs/run-{blocked.run_id}/").content.decode()

    (line,) = blockers_of(html)
    assert "Settle charge_card (publish/promote-charge) on its effect page" in line


def test_the_effect_page_says_the_money_at_stake_before_the_request(blocked):
    html = client_as("operator").get(f"/runs/run-{blocked.run_id}/effects/{blocked.pk}/")
    text = html.content.decode()

    stake = text.index("At stake: this call <strong>charges $5.00 to acct-42 (card)</strong>")
    assert stake < text.index("<details><summary>request</summary>")
    assert "Ask a supervisor to settle it" in text
