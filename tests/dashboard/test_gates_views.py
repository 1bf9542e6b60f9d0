"""The gate pages through Django's test client: who sees the form, who may answer, what an
answer writes (and what a refused one does not), the preview that writes nothing, bulk
answers, the inbox's "Waiting for a decision", and bad input.

Reviewed demo runs (review=on) are executed in this process (seed_demo.run_inline), so the
runs wait at real gates; an answer queues its stage after commit, hence transactional tests."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db.models.functions import Now
from django.urls import reverse

from demo.management.commands.seed_demo import run_inline
from demo.simulators import ensure_topic
from runs import engine
from runs.gates import answers, timeouts
from runs.gates.acts import TICK
from runs.gates.decision import gate_digest
from runs.gates.shared import shared
from runs.models import Event, Gate, GateStatus, Run
from tests.gates import pipelines as gp
from tests.support.pipelines import registered
from tests.support.web import client_as, form_values

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = frozenset({"operator"})


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def reviewed(topic: str = "") -> Run:
    """A reviewed demo run, waiting at its review before publish (of its own topic: its own
    title and body)."""
    if topic:
        ensure_topic(topic)
    inputs = {"review": "on"} | ({"topic": topic} if topic else {})
    run = engine.start_run("content", inputs, actor="test", enqueue=False)
    run = run_inline(run.pk)
    assert run.status == Run.Status.WAITING
    return run


def at_the_charge() -> Run:
    """A reviewed run whose review is answered, waiting for a supervisor at the charge."""
    run = reviewed()
    review = Gate.objects.get(run=run, gate_id="review")
    answers.answer(review.pk, dict(review.initial), actor="ana", roles=OPERATOR)
    run = run_inline(run.pk)
    assert run.status == Run.Status.WAITING
    return run


def gate_of(run: Run, gate_id: str) -> Gate:
    return Gate.objects.get(run=run, gate_id=gate_id)


def gate_url(gate: Gate, tail: str = "") -> str:
    return f"/runs/{gate.run.public_id}/gates/{gate.pk}/{tail}"


def answers_of(run: Run) -> int:
    return Event.objects.filter(run=run, type=Event.Type.HUMAN_ANSWERED).count()


def shown_all(gates: list[Gate]) -> dict[str, str]:
    """What the bulk page posts of the gates it showed, before the answer: every one of them
    in scope, and each gate's digest."""
    return {
        "scope": "all",
        "shown": ",".join(str(g.pk) for g in gates),
        **{f"digest-{g.pk}": gate_digest(g) for g in gates},
    }


def review_post(gate: Gate, **changes: str) -> dict[str, str]:
    """What the gate page posts: the form as shown (with changes) and the gate's digest."""
    return {**gate.initial, "digest": gate_digest(gate), **changes}


# --- Reading ---------------------------------------------------------------------------------


def test_viewer_sees_the_gate_page_without_a_form(facts):
    gate = gate_of(reviewed(), "review")

    page = client_as("viewer").get(gate_url(gate))

    assert page.status_code == 200
    html = page.content.decode()
    assert gate.question in html
    assert "Send the answer" not in html and 'name="decision"' not in html
    assert "This gate is for an operator or a supervisor to answer" in html


def test_the_gate_page_shows_the_draft_and_the_cover_it_reviews(facts):
    gate = gate_of(reviewed(), "review")

    html = client_as("operator").get(gate_url(gate)).content.decode()

    # The draft's markdown inline, the rendered cover as an image, the form to answer.
    assert gate.initial["body"].splitlines()[0] in html
    assert 'class="preview" src="/runs/artifacts/' in html
    assert "Send the answer" in html and 'name="title"' in html


def test_the_run_page_links_a_waiting_run_to_its_gate(facts):
    run = reviewed()
    gate = gate_of(run, "review")

    html = client_as("viewer").get(f"/runs/{run.public_id}/").content.decode()

    assert f"Waiting for a decision:</strong> {gate.question}" in html
    assert f'href="{gate_url(gate)}"' in html


def test_the_inbox_lists_the_waiting_group_first(facts):
    run = reviewed()
    gate = gate_of(run, "review")

    html = client_as("viewer").get("/runs/").content.decode()

    waiting, results = html.index('id="waiting-gates"'), html.index('id="inbox-results"')
    assert waiting < html.index('id="triage-groups"') < results
    assert f'href="{gate_url(gate)}"' in html[waiting:results]
    assert "waiting for a decision at publish/review" in html[results:]


def test_the_inbox_filters_runs_waiting_for_a_decision(facts):
    run = reviewed()
    engine.start_run("content", {}, actor="test", enqueue=False)

    html = client_as("viewer").get("/runs/?reason=waiting").content.decode()

    rows = html[html.index('id="inbox-results"') :]
    assert rows.count('<tr class="attention-') == 1 and run.public_id in rows


# --- Answering -------------------------------------------------------------------------------


def test_a_viewers_answer_is_refused_and_nothing_is_written(facts):
    run = reviewed()
    gate = gate_of(run, "review")

    response = client_as("viewer").post(gate_url(gate, "answer/"), review_post(gate))

    assert response.status_code == 403
    assert answers_of(run) == 0
    assert gate_of(run, "review").status == GateStatus.OPEN


def test_an_operators_answer_to_a_supervisor_gate_is_refused_and_nothing_is_written(facts):
    run = at_the_charge()
    gate = gate_of(run, "promote-charge")
    before = Run.objects.get(pk=run.pk).last_seq

    response = client_as("operator").post(gate_url(gate, "answer/"), {"decision": "approve"})

    assert response.status_code == 403
    assert Run.objects.get(pk=run.pk).last_seq == before
    assert gate_of(run, "promote-charge").status == GateStatus.OPEN


def test_an_operator_sees_no_form_on_a_supervisor_gate(facts):
    gate = gate_of(at_the_charge(), "promote-charge")

    html = client_as("operator").get(gate_url(gate)).content.decode()

    assert "This gate is for a supervisor to answer" in html
    assert "Send the answer" not in html
    # The pending call, with what the supervisor may change.
    assert "charge_card" in html and "NEVER" in html and "editable" in html


def test_a_valid_answer_is_recorded_and_queues_the_stage(facts):
    run = reviewed()
    gate = gate_of(run, "review")

    response = client_as("operator").post(
        gate_url(gate, "answer/"), review_post(gate, title="A better title")
    )

    assert response.status_code == 302 and response["Location"] == f"/runs/{run.public_id}/"
    answered = Event.objects.get(run=run, type=Event.Type.HUMAN_ANSWERED)
    assert answered.actor == "user:operator"
    assert answered.payload["diff"] == {"title": [gate.initial["title"], "A better title"]}
    run.refresh_from_db()
    assert (run.status, run.current_stage) == (Run.Status.RUNNING, "publish")
    assert run.ticket != ""


def test_a_body_sent_back_by_a_browser_is_not_a_change(facts):
    # A browser sends a textarea's lines ending in CRLF; the draft's end in LF.
    run = reviewed()
    gate = gate_of(run, "review")
    body = gate.initial["body"].replace("\n", "\r\n")

    client_as("operator").post(gate_url(gate, "answer/"), review_post(gate, body=body, title="T"))

    answered = Event.objects.get(run=run, type=Event.Type.HUMAN_ANSWERED)
    assert answered.payload["diff"] == {"title": [gate.initial["title"], "T"]}
    assert gate_of(run, "review").answer["body"] == gate.initial["body"]


def test_a_second_answer_is_told_who_answered_first(facts):
    run = reviewed()
    gate = gate_of(run, "review")
    client_as("operator").post(gate_url(gate, "answer/"), review_post(gate))

    response = client_as("supervisor").post(gate_url(gate, "answer/"), review_post(gate))

    assert response.status_code == 409
    assert "already answered by user:operator" in response.content.decode()
    assert answers_of(run) == 1


def test_a_second_answer_is_shown_back_to_copy_and_not_recorded(facts):
    run = reviewed()
    gate = gate_of(run, "review")
    client_as("operator").post(gate_url(gate, "answer/"), review_post(gate))
    mine = "Tighten the intro <b>please</b>"

    response = client_as("supervisor").post(
        gate_url(gate, "answer/"), review_post(gate, decision="request_changes", notes=mine)
    )

    html = response.content.decode()
    assert response.status_code == 409
    assert "What you sent, not recorded" in html
    assert "Tighten the intro &lt;b&gt;please&lt;/b&gt;" in html
    assert mine not in gate_of(run, "review").answer.values()


def test_an_answer_that_sends_the_work_back_is_not_said_to_let_the_run_go_on(facts):
    run = reviewed()
    gate = gate_of(run, "review")

    response = client_as("operator").post(
        gate_url(gate, "answer/"),
        review_post(gate, decision="request_changes", notes="Shorter, please."),
        follow=True,
    )

    said = [str(m) for m in response.context["messages"]]
    assert said == [
        "Answered publish/review: publish is handed your answer; if it cannot go on with it, "
        f"{run.public_id} stops and Ask again reopens this gate."
    ]


def deadline_passed(gate: Gate, seconds: int = 12) -> Gate:
    Gate.objects.filter(pk=gate.pk).update(
        deadline=Now() - timedelta(seconds=seconds), on_timeout={"fail": True}
    )
    return Gate.objects.get(pk=gate.pk)


def test_an_answer_after_the_deadline_is_refused_before_the_sweeper_came(facts):
    run = reviewed()
    gate = deadline_passed(gate_of(run, "review"))
    before = Run.objects.get(pk=run.pk).last_seq

    response = client_as("operator").post(gate_url(gate, "answer/"), review_post(gate))

    assert response.status_code == 409
    html = response.content.decode()
    assert "Not recorded." in html and "the deadline passed at" in html
    assert "the time-out fails the run (your answer was not recorded)" in html
    assert Run.objects.get(pk=run.pk).last_seq == before
    assert gate_of(run, "review").status == GateStatus.OPEN


def test_an_overdue_gate_says_so_on_its_page_the_run_page_and_the_inbox(facts):
    run = reviewed()
    gate = deadline_passed(gate_of(run, "review"), seconds=90)
    browser = client_as("viewer")

    pages = [
        browser.get(gate_url(gate)).content.decode(),
        browser.get(f"/runs/{run.public_id}/").content.decode(),
        browser.get("/runs/").content.decode(),
    ]

    for html in pages:
        assert re.search(r"[Dd]eadline passed 1 min ago; the time-out will apply", html)
    assert "(the time-out fails the run): answers are no longer taken" in pages[0]


def test_a_gate_before_its_deadline_is_not_shown_overdue(facts):
    run = reviewed()
    Gate.objects.filter(run=run).update(deadline=Now() + timedelta(hours=1))

    html = client_as("viewer").get(gate_url(gate_of(run, "review"))).content.decode()

    assert "deadline passed" not in html
    assert "then the time-out fails the run" in html


def test_the_history_shows_the_time_outs_answer_as_the_gates_not_as_a_vote(facts, redis_conn):
    run = reviewed()
    gate = gate_of(run, "review")
    Gate.objects.filter(pk=gate.pk).update(
        quorum=2, deadline=Now(), on_timeout={"answer": dict(gate.initial)}
    )
    timeouts.sweep()

    html = client_as("viewer").get(gate_url(gate)).content.decode()

    assert "The deadline passed: the time-out's default answer" in html
    assert "after 0 of 2 votes: the stage goes on" in html
    assert "vote 1 of 2" not in html


def test_an_answer_that_does_not_fit_the_form_is_shown_with_its_errors(facts):
    run = reviewed()
    gate = gate_of(run, "review")

    response = client_as("operator").post(gate_url(gate, "answer/"), review_post(gate, title=""))

    assert response.status_code == 400
    assert "This field is required." in response.content.decode()
    assert answers_of(run) == 0


def test_requesting_changes_without_notes_is_shown_as_an_error_of_the_notes(facts):
    run = reviewed()
    gate = gate_of(run, "review")

    response = client_as("operator").post(
        gate_url(gate, "answer/"), review_post(gate, decision="request_changes", notes="")
    )

    assert response.status_code == 400
    assert "Say what to change: the writer gets only these notes." in response.content.decode()
    assert answers_of(run) == 0


# --- The preview -----------------------------------------------------------------------------


def test_the_preview_shows_the_diff_and_writes_nothing(facts):
    run = reviewed()
    gate = gate_of(run, "review")
    before = Run.objects.get(pk=run.pk).last_seq

    response = client_as("operator").post(
        gate_url(gate, "preview/"), review_post(gate, title="Edited"), HTTP_HX_REQUEST="true"
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert "changes 1 value" in html and "<ins>Edited</ins>" in html
    assert Run.objects.get(pk=run.pk).last_seq == before
    assert gate_of(run, "review").status == GateStatus.OPEN


def test_the_preview_is_a_post_for_operators_only(facts):
    gate = gate_of(reviewed(), "review")

    assert client_as("operator").get(gate_url(gate, "preview/")).status_code == 405
    assert client_as("viewer").post(gate_url(gate, "preview/"), {}).status_code == 403


def test_the_preview_of_an_answer_that_does_not_fit_shows_the_errors(facts):
    gate = gate_of(reviewed(), "review")

    response = client_as("operator").post(gate_url(gate, "preview/"), review_post(gate, title=""))

    assert response.status_code == 200
    assert "Title: This field is required." in response.content.decode()


def test_the_preview_of_a_gate_answered_meanwhile_says_so_and_not_what_would_change(facts):
    # A stale tab: the page was read, someone else answered, then Preview was clicked.
    gate = gate_of(reviewed(), "review")
    shown = review_post(gate, title="Edited")
    answers.answer(gate.pk, dict(gate.initial), actor="user:ana", roles=OPERATOR)

    html = client_as("operator").post(gate_url(gate, "preview/"), shown).content.decode()

    assert "This answer cannot be sent:" in html and "already answered by user:ana" in html
    assert "changes 1 value" not in html


# --- Edited arguments: typed, checked, refused before anything is written ------------------

# The demo's charge: a positive amount in cents, at most its confirmation's ceiling ($100.00).
REFUSED_AMOUNTS = ("abc", "five", "-3", "nan", "inf", "5000", "100.01")


def written(run: Run, gate: Gate) -> tuple:
    """What an answer would have changed: the run's log and the gate's row."""
    gate.refresh_from_db()
    row = (gate.status, gate.votes, gate.answer, gate.diff, gate.answered_by, gate.answer_seq)
    return Event.objects.filter(run=run).count(), Run.objects.get(pk=run.pk).version, row


def charge_post(gate: Gate, **data: str) -> dict[str, str]:
    """An approval of the charge as the page sends it, ticked and naming what it was shown."""
    return {"decision": "approve", "reason": "", TICK: "on", "digest": gate_digest(gate), **data}


def test_an_amount_the_charge_refuses_is_an_error_of_its_field_and_writes_nothing(facts):
    run = at_the_charge()
    gate = gate_of(run, "promote-charge")
    before = written(run, gate)
    supervisor = client_as("supervisor")

    for amount in REFUSED_AMOUNTS:
        response = supervisor.post(gate_url(gate, "answer/"), charge_post(gate, arg_amount=amount))

        assert response.status_code == 400, amount
        assert list(response.context["form"].errors) == ["arg_amount"], amount
        assert "Not recorded." in response.content.decode()
    assert written(run, gate) == before


def test_a_refused_answer_is_said_once_in_the_form_and_pointed_to_from_the_top(facts):
    run = at_the_charge()
    gate = gate_of(run, "promote-charge")

    response = client_as("supervisor").post(
        gate_url(gate, "answer/"), charge_post(gate, arg_amount="abc")
    )

    html = response.content.decode()
    [said] = response.context["form"].errors["arg_amount"]
    assert 'said <a href="#answer">in the form below</a> beside each field' in html
    # Beside its field, and in the form's summary: not a third time in the banner.
    assert html.count(said) == 2


def test_the_preview_refuses_an_amount_the_charge_refuses_and_writes_nothing(facts):
    run = at_the_charge()
    gate = gate_of(run, "promote-charge")
    before = written(run, gate)
    supervisor = client_as("supervisor")

    for amount in REFUSED_AMOUNTS:
        response = supervisor.post(gate_url(gate, "preview/"), charge_post(gate, arg_amount=amount))

        assert response.status_code == 200
        assert list(response.context["form"].errors) == ["arg_amount"], amount
        assert "does not fit the form yet" in response.content.decode()
    assert written(run, gate) == before


def test_the_preview_of_an_edited_amount_shows_the_change_and_the_new_price(facts):
    gate = gate_of(at_the_charge(), "promote-charge")

    response = client_as("supervisor").post(
        gate_url(gate, "preview/"), charge_post(gate, arg_amount="20")
    )

    html = response.content.decode()
    assert "changes 1 value" in html
    assert "<del>5.00</del>" in html and "<ins>20.00</ins>" in html
    assert "Price: <del>$5.00</del> → <ins>$20.00</ins>" in html


def test_the_charge_page_shows_the_amounts_type_and_limits(facts):
    gate = gate_of(at_the_charge(), "promote-charge")

    html = client_as("supervisor").get(gate_url(gate)).content.decode()

    assert "(decimal, &gt; 0, at most 2 decimal places, at most 10 digits, ≤ 100.00)" in html


@pytest.fixture
def meeting(settings, facts) -> Iterator[Gate]:
    """A gate-meeting run (tests/gates/pipelines.py) waiting at its meeting's confirmation:
    a list of attendees, editable."""
    with registered(settings, *gp.PATHS):
        run = engine.start_run("gate-meeting", {}, actor="test", enqueue=False)
        yield gate_of(run_inline(run.pk), "meeting")


def test_a_list_argument_is_shown_as_json_and_an_untouched_preview_changes_nothing(meeting):
    operator = client_as("operator")
    page = operator.get(gate_url(meeting)).content.decode()
    shown = form_values(page, reverse("runs:gate_answer", args=[meeting.run_id, meeting.pk]))

    response = operator.post(gate_url(meeting, "preview/"), shown)

    assert json.loads(shown["arg_attendees"]) == gp.ATTENDEES
    assert "<strong>No changes:</strong>" in response.content.decode()


# --- Bulk ------------------------------------------------------------------------------------


def test_bulk_answers_every_open_gate_of_the_shape_and_skips_those_no_longer_open(facts):
    runs = [at_the_charge() for _ in range(3)]
    gates = [gate_of(run, "promote-charge") for run in runs]
    supervisor = client_as("supervisor")
    page = supervisor.get(f"/runs/gate-groups/{gates[0].shape}/")
    assert page.status_code == 200
    assert all(run.public_id in page.content.decode() for run in runs)
    # Someone answers one of them after the page was shown.
    answers.answer(
        gates[0].pk, {"decision": "approve", TICK: "on"}, actor="sam", roles={"supervisor"}
    )

    response = supervisor.post(
        f"/runs/gate-groups/{gates[0].shape}/answer/",
        {
            **shown_all(gates),
            "answer-decision": "approve",
            "answer-reason": "",
            f"answer-{TICK}": "on",
        },
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert "Answered 2, skipped 1" in html and "already answered by sam" in html
    for gate in gates[1:]:
        gate.refresh_from_db()
        assert (gate.status, gate.answered_by) == (GateStatus.ANSWERED, "user:supervisor")
        assert gate.answer["args"] == gate.call["args"]  # each run's own call, unedited
    assert (
        Event.objects.filter(type=Event.Type.HUMAN_ANSWERED, actor="user:supervisor").count() == 2
    )


def test_bulk_by_an_operator_on_supervisor_gates_writes_nothing(facts):
    gate = gate_of(at_the_charge(), "promote-charge")

    response = client_as("operator").post(
        f"/runs/gate-groups/{gate.shape}/answer/",
        {
            "scope": "all",
            "shown": str(gate.pk),
            f"digest-{gate.pk}": gate_digest(gate),
            "answer-decision": "approve",
            f"answer-{TICK}": "on",
        },
    )

    assert response.status_code == 409
    assert "for a supervisor to answer" in response.content.decode()
    assert answers_of(gate.run) == 1  # the review's, before


def test_a_bulk_answer_refused_names_its_field_in_the_summary_above_the_form(facts):
    gates = [gate_of(reviewed(), "review") for _ in range(2)]

    response = client_as("operator").post(
        f"/runs/gate-groups/{gates[0].shape}/answer/",
        {**shown_all(gates), "answer-decision": "approve", "answer-title": ""},
    )

    assert response.status_code == 400
    assert '<a href="#id_answer-title">Title</a>: This field is required.' in (
        response.content.decode()
    )
    assert [answers_of(g.run) for g in gates] == [0, 0]


def test_requesting_changes_in_bulk_without_notes_is_one_form_error_and_writes_nothing(facts):
    # Two topics: each run's title and body are its own, so the bulk form offers the
    # decision and the notes only.
    runs = [reviewed("bulk-notes-a"), reviewed("bulk-notes-b")]
    gates = [gate_of(run, "review") for run in runs]
    shape = gates[0].shape

    response = client_as("operator").post(
        f"/runs/gate-groups/{shape}/answer/",
        {
            **shown_all(gates),
            "answer-decision": "request_changes",
            "answer-notes": "",
        },
    )

    assert response.status_code == 400
    assert "notes: Say what to change" in response.content.decode()
    assert [answers_of(run) for run in runs] == [0, 0]


def test_the_bulk_page_of_supervisor_gates_offers_an_operator_no_form(facts):
    gate = gate_of(at_the_charge(), "promote-charge")

    html = client_as("operator").get(f"/runs/gate-groups/{gate.shape}/").content.decode()

    assert 'name="answer-decision"' not in html
    assert "These gates are for a supervisor to answer" in html
    supervisor = client_as("supervisor").get(f"/runs/gate-groups/{gate.shape}/")
    assert 'name="answer-decision"' in supervisor.content.decode()


def section(html: str, id_: str) -> str:
    start = html.index(f'id="{id_}"')
    return html[start : html.index("</section>", start)]


# --- Consequences at the button --------------------------------------------------------------

CHARGE_ACT = "charges $5.00 to acct-42 (card)"
# The charge's amount is editable: the tick names the act as asked and as edited.
CHARGE_TICK = f"{CHARGE_ACT} as asked, or as your edits make it"


def test_the_charge_page_names_the_act_beside_the_tick(facts):
    gate = gate_of(at_the_charge(), "promote-charge")

    html = client_as("supervisor").get(gate_url(gate)).content.decode()

    assert f"I confirm that approving {CHARGE_TICK}" in html
    assert f'name="{TICK}"' in html
    assert f'name="digest" value="{gate_digest(gate)}"' in html


def test_approving_a_charge_on_its_page_without_the_tick_is_a_form_error_and_writes_nothing(facts):
    run = at_the_charge()
    gate = gate_of(run, "promote-charge")
    before = Run.objects.get(pk=run.pk).last_seq

    response = client_as("supervisor").post(
        gate_url(gate, "answer/"), {"decision": "approve", "digest": gate_digest(gate)}
    )

    assert response.status_code == 400
    assert f"Tick “I confirm that approving {CHARGE_TICK}” to approve." in response.content.decode()
    assert Run.objects.get(pk=run.pk).last_seq == before
    assert gate_of(run, "promote-charge").status == GateStatus.OPEN


def test_approving_a_charge_on_its_page_with_the_tick_is_recorded(facts):
    run = at_the_charge()
    gate = gate_of(run, "promote-charge")

    response = client_as("supervisor").post(
        gate_url(gate, "answer/"), {"decision": "approve", TICK: "on", "digest": gate_digest(gate)}
    )

    assert response.status_code == 302
    assert gate_of(run, "promote-charge").answered_by == "user:supervisor"


def test_rejecting_a_charge_needs_no_tick(facts):
    run = at_the_charge()
    gate = gate_of(run, "promote-charge")

    response = client_as("supervisor").post(
        gate_url(gate, "answer/"),
        {"decision": "reject", "reason": "not this month", "digest": gate_digest(gate)},
    )

    assert response.status_code == 302
    assert gate_of(run, "promote-charge").answer["decision"] == "reject"


# --- The digest of what was shown ------------------------------------------------------------


def test_an_answer_to_a_page_that_changed_is_a_409_with_the_fresh_form_and_writes_nothing(facts):
    run = reviewed()
    gate = gate_of(run, "review")
    before = Run.objects.get(pk=run.pk).last_seq

    response = client_as("operator").post(
        gate_url(gate, "answer/"), review_post(gate, digest="f" * 64, title="Mine")
    )

    assert response.status_code == 409
    html = response.content.decode()
    assert "what you were shown changed" in html
    assert f'name="digest" value="{gate_digest(gate)}"' in html
    assert 'name="title"' in html  # the fresh form, to answer again
    assert Run.objects.get(pk=run.pk).last_seq == before
    assert gate_of(run, "review").status == GateStatus.OPEN


def test_an_answer_without_a_digest_is_refused_as_stale(facts):
    run = reviewed()
    gate = gate_of(run, "review")

    response = client_as("operator").post(gate_url(gate, "answer/"), dict(gate.initial))

    assert response.status_code == 409
    assert answers_of(run) == 0


# --- What the reviewer reads -----------------------------------------------------------------


def test_a_confirmations_description_renders_as_markdown_beside_the_call(facts):
    gate = gate_of(at_the_charge(), "promote-charge")

    html = client_as("supervisor").get(gate_url(gate)).content.decode()

    details = section(html, "details")
    assert "<strong>The promotion fee</strong>" in details
    assert "<li><em>Reject</em> with a reason" in details


def test_details_render_sanitised_and_the_question_stays_the_heading(settings):
    with registered(settings, *gp.PATHS):
        run = run_inline(engine.start_run("gate-detailed", {}, actor="test", enqueue=False).pk)
        gate = gate_of(run, "reply")

        html = client_as("operator").get(gate_url(gate)).content.decode()

    assert "<h1>Send the reply to this email?</h1>" in html
    details = section(html, "details")
    assert "<strong>From:</strong> a customer" in details
    assert "<blockquote>" in details
    assert "<script" not in details and "from the email" not in details


# --- Bulk: what is shared, and what it does --------------------------------------------------


def test_the_bulk_page_of_charges_shows_each_act_its_amount_and_the_total(facts):
    runs = [at_the_charge() for _ in range(3)]
    shape = gate_of(runs[0], "promote-charge").shape

    html = client_as("supervisor").get(f"/runs/gate-groups/{shape}/").content.decode()

    assert html.count(f'<td class="act">{CHARGE_ACT}</td>') == 3
    assert html.count('<td class="num amount">$5.00</td>') == 3
    assert '<td class="num total">3 charges, $15.00 in all</td>' in html
    assert "I confirm that approving makes 3 charges, $15.00 in all" in html


def test_the_bulk_tick_says_that_answering_the_ticked_gates_only_makes_theirs(facts):
    runs = [at_the_charge() for _ in range(3)]
    shape = gate_of(runs[0], "promote-charge").shape

    html = client_as("supervisor").get(f"/runs/gate-groups/{shape}/").content.decode()

    assert "answering the ticked gates only makes theirs, $5.00 each" in html


def test_approving_charges_in_bulk_without_the_tick_is_a_form_error_and_writes_nothing(facts):
    gates = [gate_of(at_the_charge(), "promote-charge") for _ in range(2)]

    response = client_as("supervisor").post(
        f"/runs/gate-groups/{gates[0].shape}/answer/",
        {
            **shown_all(gates),
            "answer-decision": "approve",
        },
    )

    assert response.status_code == 400
    assert "Tick “I confirm that approving makes 2 charges, $10.00 in all”" in (
        response.content.decode()
    )
    assert [gate_of(g.run, "promote-charge").status for g in gates] == [GateStatus.OPEN] * 2
    assert (
        Event.objects.filter(type=Event.Type.HUMAN_ANSWERED, payload__gate="promote-charge").count()
        == 0
    )


def test_the_bulk_review_offers_no_field_whose_value_differs_per_run(facts):
    runs = [reviewed("gates"), reviewed("leases")]
    shape = gate_of(runs[0], "review").shape

    html = client_as("operator").get(f"/runs/gate-groups/{shape}/").content.decode()

    assert "Answered run by run: title, body differ from run to run" in html
    assert 'name="answer-body"' not in html and 'name="answer-title"' not in html
    assert 'name="answer-decision"' in html and 'name="answer-notes"' in html


def test_the_bulk_page_shows_each_runs_pinned_inputs_beside_its_gate(facts):
    runs = [reviewed("gates"), reviewed("leases")]
    shape = gate_of(runs[0], "review").shape

    html = client_as("operator").get(f"/runs/gate-groups/{shape}/").content.decode()

    rows = html.split('<th scope="row">')[1:]
    assert len(rows) == 2
    for run in runs:
        (row,) = [r for r in rows if run.public_id in r.split("</th>")[0]]
        assert f"<code>topic={run.inputs['topic']}</code>" in row.split("</th>")[0]


def test_a_bulk_review_approved_on_the_page_keeps_each_runs_own_title_and_body(facts):
    gates = [gate_of(reviewed(t), "review") for t in ("gates", "leases", "plans")]

    response = client_as("operator").post(
        f"/runs/gate-groups/{gates[0].shape}/answer/",
        {
            **shown_all(gates),
            # What the page prefilled: the values every run shows alike.
            **{f"answer-{name}": value for name, value in shared(gates).initial.items()},
            "answer-decision": "approve",
            "answer-notes": "all three",
        },
    )

    assert response.status_code == 200
    for gate in gates:
        gate.refresh_from_db()
        assert gate.status == GateStatus.ANSWERED
        assert (gate.answer["title"], gate.answer["body"]) == (
            gate.initial["title"],
            gate.initial["body"],
        )
        assert gate.answer["notes"] == "all three" and gate.diff == {}
    assert len({(g.initial["title"], g.initial["body"]) for g in gates}) == 3


# --- Bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/runs/run-1/gates/abc/",
        "/runs/run-1/gates/-1/",
        "/runs/run-1/gates/1234567890123456789012345/",
        "/runs/run-1/gates/999999999999999999/",
        "/runs/run-99999999999999999999/gates/1/",
        "/runs/gate-groups/not-a-shape/",
        "/runs/gate-groups/" + "0" * 64 + "/",
        "/runs/gate-groups/" + "A" * 64 + "/",
    ],
)
def test_bad_gate_addresses_are_404(path, db):
    assert client_as("viewer").get(path).status_code == 404


def test_a_gate_of_another_run_is_404(facts):
    first, second = reviewed(), reviewed()
    gate = gate_of(first, "review")

    page = client_as("viewer").get(f"/runs/{second.public_id}/gates/{gate.pk}/")

    assert page.status_code == 404


@pytest.mark.parametrize(
    "shown",
    ["abc", "-1", "1" * 40, "1,,x", ""],
)
def test_a_malformed_bulk_answer_is_a_client_error(shown, facts):
    gate = gate_of(reviewed(), "review")

    response = client_as("operator").post(
        f"/runs/gate-groups/{gate.shape}/answer/",
        {"scope": "all", "shown": shown, "answer-decision": "approve"},
    )

    assert 400 <= response.status_code < 500
    assert answers_of(gate.run) == 0


NASTY = ["9223372036854775808", "9" * 30, "١٢", "-1", "", "x" * 5000, "run-\x00", "\u202e"]


def test_no_value_in_an_answer_preview_or_bulk_form_is_a_500(facts):
    gate = gate_of(reviewed(), "review")
    client = client_as("supervisor", raise_request_exception=False)
    posts = []
    for value in NASTY:
        for field in ("decision", "title", "body", "notes"):
            posts.append((gate_url(gate, "preview/"), review_post(gate, **{field: value})))
        for field in ("scope", "shown", "gates", "answer-decision", "answer-title"):
            posts.append((f"/runs/gate-groups/{gate.shape}/answer/", {field: value}))

    statuses = [(url, sorted(data), client.post(url, data).status_code) for url, data in posts]

    assert [s for s in statuses if s[2] >= 500] == []
    assert answers_of(gate.run) == 0


def test_an_answer_with_a_nul_character_is_not_a_500(facts):
    gate = gate_of(reviewed(), "review")
    client = client_as("operator", raise_request_exception=False)

    response = client.post(gate_url(gate, "answer/"), review_post(gate, title="a\x00b"))

    assert response.status_code < 500
