"""The run page's decision (issue 24): every run that needs a human offers on its page the
action that moves it on, or says who must act and links straight there; both options show
their cost and consequences at the button, each with its own confirmation; a blocked plan
names the effect and who unblocks it; a finished deviated run is acknowledged there; the
effect's page asks its target on a POST and records the answer in one click.

Runs are executed in this process (seed_demo.run_inline), as in test_views.py."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from demo.management.commands.seed_demo import run_inline
from demo.simulators import publish_facts
from runs import engine
from runs.access import roles
from runs.events import PlanDeviated
from runs.ledger import leases
from runs.ledger.append import RunMove, Writer, append
from runs.models import Effect, Event, Gate, Lease, Run, StoredPlan
from runs.planning import stored_plans
from runs.planning.close_out import close_out
from runs.planning.contract import Usage
from runs.quantities import money
from runs.reads import decision as decision_q
from runs.reads.verdicts import PlanVerdict
from tests.support.plans import (
    TOPIC,
    charge_unknown,
    finished_deviated,
    interrupted_with_plan,
    stopped_with_plan,
)
from tests.support.web import client_as

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.RESUMER_LEASE_TTL = 120


def page_of(client, run: Run) -> str:
    response = client.get(f"/runs/{run.public_id}/")
    assert response.status_code == 200
    return response.content.decode()


def decision_of(html: str) -> str:
    return html[html.index('<aside id="decision"') : html.index("</aside>")]


def deviated(run: Run) -> Run:
    token = leases.acquire(run.pk, "test", takeover=True)
    append(
        Writer(run.pk, token, "test"),
        PlanDeviated(reason="upload_asset: 2 calls, the plan said 1"),
        move=RunMove(deviated=True),
    )
    leases.release(run.pk, token)
    return Run.objects.get(pk=run.pk)


def drifted() -> Run:
    run = stopped_with_plan({"timeout": "publish/promote-charge/after"})
    run = Run.objects.get(pk=run.pk)
    return run


# --- every stop has a way out ----------------------------------------------------------------


def way_out(kind: str) -> tuple[Run, str, str]:
    """A run that needs a human for `kind`, the role that moves it on, and the form action or
    link its page must offer that role."""
    if kind == "interrupted":
        run = interrupted_with_plan()
        return run, "operator", f'action="/runs/{run.public_id}/approve/"'
    if kind == "failed":
        run = stopped_with_plan({"timeout": "visual/render-cover/after"})
        assert run.status == Run.Status.FAILED
        return run, "operator", f'action="/runs/{run.public_id}/approve/"'
    if kind == "blocked":
        run = charge_unknown()
        stored_plans.refresh(run)
        charge = Effect.objects.get(run=run, call_id="promote-charge")
        return run, "supervisor", f'href="/runs/{run.public_id}/effects/{charge.pk}/"'
    if kind == "deviated-finished":
        run = finished_deviated()
        return run, "operator", f'action="/runs/{run.public_id}/acknowledge/"'
    if kind == "deviated-stopped":
        run = deviated(interrupted_with_plan())
        assert run.is_resumable and run.deviated
        return run, "operator", f'action="/runs/{run.public_id}/approve/"'
    if kind == "waiting":
        run = run_inline(engine.start_run("content", {"review": "on"}, actor="t", enqueue=False).pk)
        gate = Gate.objects.get(run=run, status=Gate.Status.OPEN)
        return run, "operator", f'href="/runs/{run.public_id}/gates/{gate.pk}/"'
    if kind == "drifted":
        run = interrupted_with_plan()
        publish_facts(TOPIC)
        stored_plans.refresh(run)
        return run, "operator", 'name="action" value="upgrade"'
    raise AssertionError(kind)


KINDS = [
    "interrupted",
    "failed",
    "blocked",
    "deviated-finished",
    "deviated-stopped",
    "waiting",
    "drifted",
]


@pytest.mark.parametrize("kind", KINDS)
def test_every_run_that_needs_a_human_offers_its_way_out(kind, facts):
    run, role, control = way_out(kind)
    run.refresh_from_db()
    assert Run.attention_for(run.status, run.deviated) == 0, "it needs a human"
    html = page_of(client_as(role), run)
    assert control in decision_of(html), f"{kind}: {control} not in the decision"
    # A viewer is told who acts, and is offered no control that would be refused.
    viewer = decision_of(page_of(client_as("viewer"), run))
    assert "<form" not in viewer and "<button" not in viewer
    if kind == "blocked":
        assert "a supervisor settles it there" in viewer
        assert control in viewer  # the link to the effect itself, not the run's list
    if kind == "deviated-finished":
        assert "An operator acknowledges the deviation" in viewer


# --- consequences at the button --------------------------------------------------------------


def test_upgrade_shows_its_cost_and_irreversible_acts_at_its_own_confirmation(facts):
    run = stopped_with_plan({"timeout": "publish/promote-charge/after"})
    # promote-charge's outcome is unknown: confirm it so the plan is not blocked.
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    from runs.ledger.edits import edit_effect

    edit_effect(charge.pk, {"status": "confirmed", "external_id": "ch-x"}, reason="r", actor="t")
    publish_facts(TOPIC)
    plan = stored_plans.refresh(Run.objects.get(pk=run.pk))
    assert plan.can_upgrade
    html = decision_of(page_of(client_as("operator"), run))
    upgrade = html[html.index("option-upgrade") :]
    cost = f"up to {plan.upgrade.cost.tool_calls} calls, {money(plan.upgrade.cost.money)}"
    assert cost in upgrade
    assert "re-runs research → publish" in upgrade
    assert re.search(r"publishes a second article \(the first, \S+, stays\)", upgrade)
    label = re.search(r"I accept that it ([^<]*)</label>", upgrade)[1]
    assert re.search(r"publishes a second article \(the first, \S+, stays\)", label)
    assert label.startswith("takes facts v3 → v4 and ")
    assert "charges $5.00 again (the first, ch-x, stays)" in label
    strict = html[html.index("option-strict") : html.index("option-upgrade")]
    assert "I have read the plan" in strict and "publishes" not in strict
    # Two forms, two boxes: one tick never confirms the other option.
    assert html.count('name="confirm"') == 2
    assert html.count(f'<form method="post" action="/runs/{run.public_id}/approve/"') == 2
    assert 'name="action" value="upgrade">Upgrade</button>' in upgrade


def test_a_plan_stored_with_its_warnings_as_sentences_still_shows_them(facts):
    run = stopped_with_plan({"timeout": "publish/promote-charge/after"})
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    from runs.ledger.edits import edit_effect

    edit_effect(charge.pk, {"status": "confirmed", "external_id": "ch-x"}, reason="r", actor="t")
    publish_facts(TOPIC)
    plan = stored_plans.refresh(Run.objects.get(pk=run.pk))
    said = [str(w) for w in plan.upgrade.warnings]
    assert len(said) == 2 and all("already made" in s for s in said)
    # As the planner stored it before its warnings were records.
    stored = StoredPlan.objects.get(run=run)
    stored.data["upgrade"]["warnings"] = said
    StoredPlan.objects.filter(pk=stored.pk).update(data=stored.data)

    shown = stored_plans.shown(run)[0]
    html = decision_of(page_of(client_as("operator"), run))
    plan_page = client_as("operator").get(f"/runs/{run.public_id}/plan/").content.decode()

    assert shown.upgrade.warnings == said
    label = re.search(r"I accept that it ([^<]*)</label>", html[html.index("option-upgrade") :])
    assert label[1].strip() == "takes facts v3 → v4 and " + ", ".join(said)
    assert all(f"<li>{s}</li>" in plan_page for s in said)


def test_the_upgrade_without_its_own_tick_is_refused_with_its_own_message(facts):
    run = interrupted_with_plan()
    publish_facts(TOPIC)
    plan = stored_plans.refresh(run)
    response = client_as("operator").post(
        f"/runs/{run.public_id}/approve/", {"action": "upgrade", "fingerprint": plan.fingerprint}
    )
    assert response.status_code == 400
    assert "Tick the box beside Upgrade" in response.content.decode()
    assert Run.objects.get(pk=run.pk).status == Run.Status.INTERRUPTED


def test_a_blocked_plan_names_what_blocks_it_and_links_the_effect_not_a_price(facts):
    run = charge_unknown()
    stored_plans.refresh(run)
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    html = decision_of(page_of(client_as("operator"), run))
    assert "Blocked: a supervisor decides first" in html
    assert "charge_card (publish/promote-charge)" in html
    assert f'href="/runs/{run.public_id}/effects/{charge.pk}/"' in html
    assert "$0.0000" not in html and "Resume:" not in html
    assert "admin/runs/effect/?run=" not in page_of(client_as("supervisor"), run)


def test_a_blocked_call_is_listed_with_its_effect_and_its_reason_in_full(facts):
    run = charge_unknown()
    stored_plans.refresh(run)
    plan, stored = stored_plans.shown(run)

    found = decision_q.decision(run, plan, stored)

    [line] = [e for e in plan.effects if e.call_id == "promote-charge"]
    # Once: the call's reason in full, with its effect (the plan's blocker is that reason).
    assert [(b.text, b.label, b.effect_pk is not None) for b in found.blockers] == [
        (line.reason, "charge_card (publish/promote-charge)", True),
    ]
    assert line.reason == plan.blockers[0] and "is NEVER" in line.reason


def test_finished_runs_offer_no_approval_on_the_run_page_or_the_plan_page(facts):
    run = interrupted_with_plan()
    run = run_inline(run.pk) if False else run
    done = run_inline(engine.start_run("content", {}, actor="t", enqueue=False).pk)
    assert done.status == Run.Status.SUCCEEDED
    operator = client_as("operator")
    assert "/approve/" not in page_of(operator, done)
    # A stored plan from before it finished must not tempt anyone on the plan page either.
    stored_plans.store(stored_plans.compute_plan(run))
    from runs.models import StoredPlan

    StoredPlan.objects.filter(run=run).update(run_id=done.pk)
    plan_page = operator.get(f"/runs/{done.public_id}/plan/").content.decode()
    assert ">Strict resume</button>" not in plan_page
    assert "there is nothing to approve" in plan_page


# --- acknowledging a deviation ---------------------------------------------------------------


def test_an_operator_acknowledges_a_finished_deviation_with_a_reason(facts):
    run = finished_deviated()
    operator = client_as("operator")
    refused = operator.post(f"/runs/{run.public_id}/acknowledge/", {"reason": "  "})
    assert refused.status_code == 409
    assert "Not acknowledged: say why" in refused.content.decode()
    assert client_as("viewer").post(f"/runs/{run.public_id}/acknowledge/", {"reason": "x"}).status_code == 403  # fmt: skip
    done = operator.post(
        f"/runs/{run.public_id}/acknowledge/", {"reason": "the reuse saved money"}, follow=True
    )
    assert "deviation is acknowledged" in done.content.decode()
    run.refresh_from_db()
    assert not run.deviated and Run.attention_for(run.status, run.deviated) == 2
    event = Event.objects.filter(run=run, type=Event.Type.ACKNOWLEDGED).get()
    assert event.payload["by"] == "user:operator"
    assert "/acknowledge/" not in decision_of(page_of(operator, run))


def test_acknowledging_a_run_with_nothing_to_acknowledge_says_why_and_changes_nothing(facts):
    run = finished_deviated()
    client_as("operator").post(f"/runs/{run.public_id}/acknowledge/", {"reason": "read it"})
    seq = Run.objects.get(pk=run.pk).last_seq

    again = client_as("operator").post(f"/runs/{run.public_id}/acknowledge/", {"reason": "twice"})

    assert again.status_code == 409
    assert 'role="alert">Not acknowledged:' in again.content.decode()
    assert Run.objects.get(pk=run.pk).last_seq == seq


# --- the effect's page -----------------------------------------------------------------------


def test_the_effect_page_asks_the_target_on_the_post_only_and_records_in_one_click(
    facts, demo_service
):
    run = charge_unknown()
    stored_plans.refresh(run)
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    url = f"/runs/{run.public_id}/effects/{charge.pk}/"
    supervisor = client_as("supervisor")
    before = demo_service.count("charge.lookup", outcome=None)
    html = supervisor.get(url).content.decode()
    assert "Ask the card processor what it holds" in html
    assert demo_service.count("charge.lookup", outcome=None) == before  # a GET asks nothing
    # Operators and viewers read the page; only a supervisor asks.
    for role in ("viewer", "operator"):
        assert client_as(role).get(url).status_code == 200
        assert client_as(role).post(url + "ask/").status_code == 403
    assert supervisor.get(url + "ask/").status_code == 405
    asked = supervisor.post(url + "ask/", follow=True).content.decode()
    assert demo_service.count("charge.lookup", outcome=None) == before + 1
    held = demo_service.charges()[0]["id"]
    assert f"Record what the card processor holds: {held}" in asked
    event = Event.objects.get(run=run, type=Event.Type.TARGET_ASKED)
    recorded = supervisor.post(url + "record/", {"asked": event.seq})
    assert recorded.status_code == 302 and recorded["Location"] == f"/runs/{run.public_id}/"
    charge.refresh_from_db()
    assert (charge.status, charge.external_id) == (Effect.Status.CONFIRMED, held)
    assert demo_service.count("charge.lookup", outcome=None) == before + 1
    edit = Event.objects.get(run=run, type=Event.Type.LEDGER_EDITED)
    assert f"event #{event.seq}" in edit.payload["reason"]
    assert "nothing to resolve" in supervisor.get(url).content.decode()


def test_asking_the_target_says_it_answered_by_its_name(facts, demo_service):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")

    response = client_as("supervisor").post(
        f"/runs/{run.public_id}/effects/{charge.pk}/ask/", follow=True
    )

    said = [str(m) for m in response.context["messages"]]
    assert said[0].startswith("The card processor answered; recorded as event #")


def test_a_settled_effects_page_says_who_settled_it_and_why(facts, demo_service):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    url = f"/runs/{run.public_id}/effects/{charge.pk}/"
    supervisor = client_as("supervisor")
    supervisor.post(url + "ask/")
    asked = Event.objects.get(run=run, type=Event.Type.TARGET_ASKED)
    supervisor.post(url + "record/", {"asked": asked.seq})
    edit = Event.objects.get(run=run, type=Event.Type.LEDGER_EDITED)

    html = supervisor.get(url).content.decode()

    assert "Nobody has asked" not in html
    held = Effect.objects.get(pk=charge.pk).external_id
    assert f"Settled by user:supervisor (event #{edit.seq}): " in html
    assert f"recorded as <code>{held}</code>" in html
    assert "Confirmed: <span" not in html  # the error of the unknown outcome is history now


def test_a_closed_runs_effect_page_offers_no_plan_and_no_ledger_edit(facts):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    stored_plans.refresh(run)  # the plan its stop had a worker compute
    close_out(run.pk, "not worth chasing", actor="user:supervisor")

    html = (
        client_as("supervisor").get(f"/runs/{run.public_id}/effects/{charge.pk}/").content.decode()
    )

    assert f"The plan of {run.public_id}" not in html
    assert "its ledger is resolved only while the run is stopped" in html
    assert "then correct the ledger" not in html


def test_an_effect_of_another_run_is_a_404(facts):
    run = charge_unknown()
    other = interrupted_with_plan()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    assert client_as("viewer").get(f"/runs/{other.public_id}/effects/{charge.pk}/").status_code == 404  # fmt: skip


# --- the verdict, the heartbeat, the events count ---------------------------------------------


def test_a_kept_upper_bound_says_how_much_of_the_promise_was_used():
    def usage(calls: int, amount: str) -> Usage:
        return Usage({"render_image": calls}, {}, Decimal(amount))

    kept = PlanVerdict(True, 9, "f" * 64, "upgrade", usage(10, "5.1830"), usage(9, "5.14"), "")
    assert kept.summary == "Plan kept: 9 of 10 promised calls, $5.14 of $5.1830"
    exact = PlanVerdict(True, 9, "f" * 64, "strict", usage(3, "5.001"), usage(3, "5.001"), "")
    assert exact.summary == "Plan kept: 3 calls, $5.0010, as approved"


def test_a_kept_verdict_whose_models_cost_more_than_estimated_says_so():
    promised = Usage({"model": 12}, {}, Decimal("5.1369"), metered_money=Decimal("0.1369"))
    used = Usage({"model": 12}, {}, Decimal("5.1374"), metered_money=Decimal("0.1374"))

    kept = PlanVerdict(True, 9, "f" * 64, "upgrade", promised, used, "")

    assert kept.summary.startswith(
        "Plan kept: 12 of 12 promised calls, $5.1374 against $5.1369 estimated: the models' "
        "answers cost $0.0005 more than estimated"
    )


def test_a_kept_verdict_says_the_calls_the_plan_could_not_list_apart_from_its_promise():
    promised = Usage({}, {}, Decimal("0"))
    used = Usage({"pay": 1}, {}, Decimal("20.00"), beyond={"pay": 1}, beyond_money=Decimal(20))

    kept = PlanVerdict(True, 9, "f" * 64, "strict", promised, used, "")

    assert kept.summary == (
        "Plan kept: 0 calls, $0.00, as approved; and 1 call it could not list, $20.00, made "
        "as the stage went, each held to its policy and gates"
    )


def test_a_verdict_says_the_model_tokens_the_resumed_work_used():
    def usage(money: str, prompt: int, completion: int) -> Usage:
        tokens = {"prompt": prompt, "completion": completion, "cached": 40}
        return Usage({"model": 2}, {}, Decimal(money), tokens, Decimal(money))

    kept = PlanVerdict(
        True, 9, "f" * 64, "strict", usage("0.01", 900, 334), usage("0.01", 900, 334), ""
    )
    assert kept.summary == "Plan kept: 2 calls, $0.01 (1,234 model tokens), as approved"
    deviated = PlanVerdict(
        False, 9, "f" * 64, "strict", usage("0.01", 900, 334), usage("0.02", 2000, 500), "a retry"
    )
    assert deviated.summary.endswith("so far: 2 calls, $0.02 (2,500 model tokens))")


def test_a_silent_worker_shows_before_the_sweeper_s_verdict(facts, settings):
    settings.RESUMER_LEASE_TTL = 30
    run = engine.start_run("content", {}, actor="test", enqueue=False)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    now = timezone.now()
    Lease.objects.filter(run=run).update(
        holder="worker-1", heartbeat_at=now - timedelta(seconds=12), expires_at=now
    )
    run = Run.objects.select_related("lease").get(pk=run.pk)
    assert decision_q.silent_for(run, now) == 12
    assert "worker silent for 1" in decision_of(page_of(client_as("viewer"), run))
    Lease.objects.filter(run=run).update(heartbeat_at=now - timedelta(seconds=5))
    run = Run.objects.select_related("lease").get(pk=run.pk)
    assert decision_q.silent_for(run, now) is None


def test_the_events_count_never_says_fewer_than_it_shows(facts):
    from runs.reads.run_page import timeline

    run = interrupted_with_plan()
    stale = Run.objects.get(pk=run.pk)
    deviated(run)  # one more event after the page read the run
    page = timeline(stale, None)
    assert page.total == page.events[-1].seq > stale.last_seq


# --- the page follows the run ----------------------------------------------------------------


def test_a_stopped_run_keeps_polling_until_its_plan_is_stored_then_the_poll_brings_it(facts):
    from runs.execution import sweeper

    run = engine.start_run("content", {}, actor="test", enqueue=False)
    sweeper.interrupt(sweeper.Finding(run.pk, "test: gone", {}), takeover=True)
    viewer = client_as("viewer")
    html = page_of(viewer, run)
    assert 'hx-trigger="every 2s"' in html
    assert "computing the plan" in decision_of(html)
    seen = re.search(r'name="seen" value="([0-9-]+)"', html)[1]
    quiet = viewer.get(f"/runs/{run.public_id}/timeline/?seen={seen}").content.decode()
    assert 'id="decision"' not in quiet  # nothing moved: the decision is left as it is
    stored_plans.refresh(Run.objects.get(pk=run.pk))
    news = viewer.get(f"/runs/{run.public_id}/timeline/?seen={seen}").content.decode()
    assert 'id="plan-slot" hx-swap-oob="true"' in news and "Reconcile plan" in news
    assert 'hx-trigger="every 5s"' in news  # still following: an approval may come
    assert "Resumable at" in news


def test_a_finished_run_page_does_not_poll(facts):
    done = run_inline(engine.start_run("content", {}, actor="t", enqueue=False).pk)
    assert "hx-trigger" not in page_of(client_as("viewer"), done)


def test_roles_helper_is_used(facts):
    assert roles.can_edit_ledger(roles.ensure_user("supervisor", "p", "supervisor")[0])


# --- the admin's ledger form: refusals are form errors ----------------------------------------


def admin_post(effect: Effect, **data: str):
    return client_as("supervisor").post(
        f"/admin/runs/effect/{effect.pk}/change/",
        {"error": effect.error, "reason": "checked", "_save": "Save", **data},
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"status": "confirmed", "external_id": ""}, "A confirmed effect needs the external id"),
        ({"status": "intent", "external_id": ""}, "only the engine records"),
        ({"status": "unknown", "external_id": ""}, "nothing changed"),
    ],
)
def test_the_admin_shows_the_ledger_s_refusals_as_form_errors(facts, data, message):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    response = admin_post(charge, **data)
    html = response.content.decode()
    assert response.status_code == 200
    assert message in html and "errorlist" in html
    assert "Constraint" not in html and "is violated" not in html
    assert not Event.objects.filter(run=run, type=Event.Type.LEDGER_EDITED).exists()


def test_a_finished_run_s_ledger_edit_is_refused_as_a_form_error(facts):
    done = run_inline(engine.start_run("content", {}, actor="t", enqueue=False).pk)
    charge = Effect.objects.get(run=done, call_id="promote-charge")
    response = admin_post(charge, status="failed", external_id="")
    assert response.status_code == 200
    assert "its ledger is edited only while the run is stopped" in response.content.decode()
    charge.refresh_from_db()
    assert charge.status == Effect.Status.CONFIRMED
