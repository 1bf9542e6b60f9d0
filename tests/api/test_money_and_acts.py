"""The API's money is one type (`Money`: cents, or four places for a fraction of a cent, as
every face shows it), its token counts another (`Tokens`), and a stored plan says what each
option does outside in the same words as the run page's bar (runs/planning/acts.py)."""

from __future__ import annotations

import re

import pytest

from runs.planning import stored_plans
from runs.planning.acts import plan_acts
from tests.support.plans import stopped_with_plan
from tests.support.web import client_as

pytestmark = pytest.mark.django_db

MONEY = re.compile(r"^-?[0-9]+\.[0-9]{2}([0-9]{2})?$")


def test_every_amount_the_api_gives_is_money_in_one_representation(viewer, facts):
    run = stopped_with_plan({"timeout": "visual/render-cover/after"})

    effects = viewer.get(f"/runs/{run.public_id}/effects").json()
    plan = viewer.get(f"/runs/{run.public_id}/plan").json()["plan"]
    listed = viewer.get("/runs").json()["items"][0]["stop"]["plan"]

    amounts = [e["cost"] for e in effects] + [e["cost"] for e in plan["effects"]]
    amounts += [plan[c]["money"] for c in ("cost_resume", "cost_fresh")]
    amounts += [listed["resume_money"], listed["fresh_money"]]
    assert all(MONEY.match(a) for a in amounts), amounts
    # What a stored plan keeps at four places reads as cents when it has no fraction of one.
    charge = next(e for e in plan["effects"] if e["call_id"] == "promote-charge")
    assert charge["cost"] == "5.00"


def test_money_and_tokens_are_declared_once_in_the_schema(viewer, db):
    schema = client_as("viewer").get("/api/v1/openapi.json").json()["components"]["schemas"]

    def money(schema_name: str, field: str) -> dict:
        declared = dict(schema[schema_name]["properties"][field])
        declared.pop("title")
        return declared

    cost = money("EffectOut", "cost")
    assert cost["type"] == "string" and cost["pattern"] == MONEY.pattern
    assert money("StoredPlanFigures", "resume_money") == cost
    assert money("GroupOut", "resume_money") == cost
    tokens = schema["CostOut"]["properties"]["tokens"]["additionalProperties"]
    assert tokens["type"] == "integer" and tokens["minimum"] == 0


def test_the_stored_plan_says_each_options_acts_as_the_run_page_does(viewer, operator, facts):
    run = stopped_with_plan({"timeout": "visual/render-cover/after"})

    acts = viewer.get(f"/runs/{run.public_id}/plan").json()["acts"]

    assert acts["strict"]["acts"] == ["publishes an article", "charges $5.00"]
    plan = stored_plans.shown(run)[0]
    assert acts["strict"]["does"] == plan_acts(plan).strict.does
    page = client_as("operator").get(f"/runs/{run.public_id}/").content.decode()
    assert f'<span class="option-does">{acts["strict"]["does"]}</span>' in page
