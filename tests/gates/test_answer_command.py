"""`manage.py answer_gate`: the open gates with their digests, one gate shown, and an answer
through gates.answers.answer (approve, reject, edit, the act's tick) as the gate page gives
it; a bad answer is a CommandError that records nothing."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from runs.access import roles
from runs.gates.decision import gate_digest
from runs.management.commands import answer_gate as answer_gate_command
from runs.models import Event, Gate, GateStatus, Run
from tests.gates.test_answers import waiting_at_charge, waiting_at_review

pytestmark = pytest.mark.django_db(transaction=True)


def answer_gate(*args: str) -> str:
    out = StringIO()
    call_command("answer_gate", *args, stdout=out)
    return out.getvalue()


def answered(gate: Gate) -> int:
    return Event.objects.filter(run_id=gate.run_id, type=Event.Type.HUMAN_ANSWERED).count()


def test_the_listing_names_each_open_gate_with_its_digest(facts):
    gate = waiting_at_review()

    listed = answer_gate()

    assert f"{gate.pk}  {gate.run.public_id}" in listed
    assert "publish/review" in listed and gate_digest(gate) in listed


def test_show_prints_the_gates_fields_and_its_digest(facts):
    gate = waiting_at_charge()

    shown = answer_gate(str(gate.pk), "--show")

    assert "charge_card" in shown and "add --confirm-act" in shown
    assert "  amount: editable (decimal" in shown and "      shown: 5.00" in shown
    assert shown.rstrip().endswith(f"digest: {gate_digest(gate)}")


def test_an_approval_keeps_what_the_gate_showed_and_the_stage_goes_on(facts, redis_conn):
    gate = waiting_at_review()

    out = answer_gate(str(gate.pk), "--digest", gate_digest(gate), "--approve")

    assert "answered: the stage goes on" in out
    gate.refresh_from_db()
    assert (gate.status, gate.answered_by) == (GateStatus.ANSWERED, "user:cli")
    assert gate.answer["title"] == gate.initial["title"] and gate.diff == {}
    assert Run.objects.get(pk=gate.run_id).status == Run.Status.RUNNING


def test_a_rejection_records_its_reason(facts, redis_conn):
    gate = waiting_at_charge()

    answer_gate(str(gate.pk), "--digest", gate_digest(gate), "--reject", "--reason", "no budget")

    gate.refresh_from_db()
    assert gate.approved is False and gate.answer["reason"] == "no budget"


def test_an_edited_approval_as_a_user_is_made_with_the_edit(facts, redis_conn):
    gate = waiting_at_charge()
    roles.ensure_user("sam", "sam-test-pass-1", roles.SUPERVISOR)

    answer_gate(
        *(str(gate.pk), "--digest", gate_digest(gate), "--approve"),
        *("--set", "amount=7.50", "--confirm-act", "--as", "sam"),
    )

    gate.refresh_from_db()
    assert gate.approved is True and gate.answered_by == "user:sam"
    assert gate.answer["args"]["amount"] == "7.50"
    assert gate.diff == {"amount": [gate.call["args"]["amount"], "7.50"]}


REFUSED = [
    pytest.param([], "--digest is required", id="no-digest"),
    pytest.param(["--digest", "0" * 64], "Fresh digest", id="a-stale-digest"),
    pytest.param(["--approve"], "needs --confirm-act, the tick", id="no-tick-for-money"),
    pytest.param(["--approve", "--set", "colour=red", "--confirm-act"], "fields are", id="field"),
    pytest.param(["--approve", "--set", "amount", "--confirm-act"], "NAME=VALUE", id="no-value"),
    pytest.param(["--approve", "--set", "amount=-3", "--confirm-act"], "amount", id="bad-edit"),
    pytest.param(["--reject"], "reason", id="a-rejection-without-a-reason"),
    pytest.param(
        ["--reject", "--reason", "no", "--set", "amount=7.50"],
        "--reject makes no call, so an edit of amount would not be recorded",
        id="an-edit-beside-a-rejection",
    ),
    pytest.param(["--confirm-act"], "say --approve or --reject", id="no-decision-on-a-call"),
    pytest.param(["--approve", "--confirm-act", "--as", "vic"], "supervisor", id="a-viewer"),
    pytest.param(["--approve", "--confirm-act", "--as", "nobody"], "no active user", id="user"),
]


@pytest.mark.parametrize(("args", "said"), REFUSED)
def test_a_bad_answer_is_refused_and_changes_nothing(facts, args, said):
    gate = waiting_at_charge()
    roles.ensure_user("vic", "vic-test-pass-1", roles.VIEWER)
    digest = [] if "--digest" in args or not args else ["--digest", gate_digest(gate)]
    before = (Run.objects.get(pk=gate.run_id).version, answered(gate))

    with pytest.raises(CommandError, match=said):
        answer_gate(str(gate.pk), *digest, *args)

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert (Run.objects.get(pk=gate.run_id).version, answered(gate)) == before


def test_a_refusal_ending_in_a_sentence_is_followed_by_one(facts):
    gate = waiting_at_review()

    with pytest.raises(CommandError) as refused:
        answer_gate(str(gate.pk), "--digest", gate_digest(gate), "--set", "title=")

    said = str(refused.value)
    assert "This field is required. Nothing was recorded." in said and ".;" not in said


def test_an_unknown_gate_is_refused(db):
    with pytest.raises(CommandError, match="there is no gate '99999'"):
        answer_gate("99999", "--show")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--reject"], "this question's decision is one of approve, request_changes"),
        (["--approve", "--set", "decision=request_changes"], "give the decision once"),
    ],
)
def test_a_flag_that_is_not_the_questions_own_decision_is_refused(facts, args, said):
    # --reject is a confirmation's; a question's decision is its form's own choice, and a
    # flag never overwrites the one --set gave.
    gate = waiting_at_review()

    with pytest.raises(CommandError, match=said):
        answer_gate(str(gate.pk), "--digest", gate_digest(gate), *args)

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN and answered(gate) == 0


def test_requesting_changes_without_notes_is_refused_by_the_stages_form(facts):
    gate = waiting_at_review()

    with pytest.raises(CommandError, match="notes: Say what to change"):
        answer_gate(
            str(gate.pk), "--digest", gate_digest(gate), "--set", "decision=request_changes"
        )

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN and answered(gate) == 0


def test_a_name_that_is_both_an_argument_and_the_forms_own_field_is_refused_not_guessed():
    fields = {"decision": None, "reason": None, "arg_reason": None, "arg_amount": None}

    with pytest.raises(CommandError, match="reason is both the call's argument"):
        answer_gate_command._field(fields, "reason", "reason=late")

    assert answer_gate_command._field(fields, "arg_reason", "arg_reason=late") == "arg_reason"
    assert answer_gate_command._field(fields, "amount", "amount=5") == "arg_amount"
    assert answer_gate_command._names(fields) == "decision, reason, arg_reason, amount"


def test_a_second_answer_is_refused_saying_once_that_nothing_was_written(facts, redis_conn):
    gate = waiting_at_review()
    digest = gate_digest(gate)
    answer_gate(str(gate.pk), "--digest", digest, "--approve")

    with pytest.raises(CommandError) as refused:
        answer_gate(str(gate.pk), "--digest", digest, "--approve")

    said = str(refused.value)
    assert said.startswith("already answered by user:cli")
    assert said.endswith("; nothing was changed") and "recorded" not in said


def test_a_rejection_says_the_stage_goes_on_handed_the_rejection(facts, redis_conn):
    gate = waiting_at_charge()

    out = answer_gate(str(gate.pk), "--digest", gate_digest(gate), "--reject", "--reason", "no")

    assert "the stage goes on, handed the rejection (the call is not made)" in out
    assert Gate.objects.get(pk=gate.pk).answer["decision"] == "reject"
