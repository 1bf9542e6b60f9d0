"""`manage.py answer_gate`: the open gates, one gate as its page shows it, and an answer
through gates.answers.answer, the flow every face answers with: the gate's role, the digest
of what was shown, its form (with the act's tick), the compare-and-set."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs import ids
from runs.access import roles
from runs.checks import COMMAND_CHECKS
from runs.gates import answers
from runs.gates.acts import TICK, act_of
from runs.gates.decision import gate_digest
from runs.gates.forms import APPROVE, REJECT
from runs.management.commands.start_run import InputsHelpFormatter
from runs.models import Gate, GateKind, GateStatus

EXAMPLES = """\
examples:
  manage.py answer_gate                                  the open gates, oldest first
  manage.py answer_gate 12 --show                        gate 12: what it asks, its fields,
                                                         its digest
  manage.py answer_gate 12 --digest D --approve          approve what was shown
  manage.py answer_gate 12 --digest D --approve --set amount=20.00 --confirm-act
                                                         approve an edited call that costs
                                                         money (the tick names the act)
  manage.py answer_gate 12 --digest D --reject --reason "wrong account"
  manage.py answer_gate 12 --digest D --set title="Release 2.4" --as sam
                                                         a question's own fields, as sam"""


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Answer a gate a run waits at, as its page does: list the open gates, --show one "
        "(its fields and its digest), then answer it with that --digest. Nothing is recorded "
        "when the answer does not fit, the digest is stale, or someone answered first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.epilog = EXAMPLES
        parser.formatter_class = InputsHelpFormatter  # the examples as they are written
        parser.add_argument("gate", nargs="?", help="the gate's id (the listing's first column)")
        parser.add_argument("--show", action="store_true", help="show the gate; answer nothing")
        parser.add_argument("--digest", help="the digest --show printed: what you answer")
        verdict = parser.add_mutually_exclusive_group()
        verdict.add_argument("--approve", action="store_const", const=APPROVE, dest="decision")
        verdict.add_argument("--reject", action="store_const", const=REJECT, dest="decision")
        parser.add_argument("--reason", help="why (a rejection of a call needs one)")
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help="a field of the gate's form, or an editable argument of its call "
            "(a list or an object as JSON); repeatable",
        )
        parser.add_argument(
            "--confirm-act",
            action="store_true",
            help="tick the box that names what approving does (a call that costs money, or "
            "that cannot simply be made again, needs it)",
        )
        parser.add_argument(
            "--as",
            dest="username",
            help="answer as this user, with their role (a quorum counts votes by user); "
            "default: the command line, with every role",
        )

    def handle(self, *args, **opts) -> None:
        if not opts["gate"]:
            self._list()
            return
        gate = self._gate(opts["gate"])
        if opts["show"]:
            self._show(gate)
            return
        if not opts["digest"]:
            raise CommandError(
                f"--digest is required: the one `answer_gate {gate.pk} --show` prints"
            )
        actor, held, user = self._who(opts["username"])
        try:
            # What every face says first: answered or closed meanwhile, then a stale digest.
            answers.check_answerable(gate, opts["digest"])
            data = self._data(gate, opts)
            done = answers.answer(
                gate.pk, data, actor=actor, roles=held, user=user, digest=opts["digest"]
            )
        except answers.StaleAnswer as exc:
            raise CommandError(f"{exc}. Fresh digest: {exc.digest}") from exc
        except answers.AnswerRefused as exc:
            said = str(exc)
            # Most refusals say already that nothing was written: said once.
            if "nothing was" not in said and "not recorded" not in said:
                # After a sentence of the form's ("… is required."), a sentence of its own.
                said += " Nothing was recorded." if said.endswith(".") else "; nothing was recorded"
            raise CommandError(said) from exc
        said = "the stage goes on" if done.final else f"{done.missing} more vote(s) needed"
        if done.final and (done.gate.answer or {}).get("decision") == REJECT and done.gate.call:
            # It is handed CallRejected (or the rejection as the call's result): not the call.
            said = "the stage goes on, handed the rejection (the call is not made)"
        self.stdout.write(f"gate {gate.pk} of {gate.run.public_id} answered: {said}")

    def _gate(self, given: str) -> Gate:
        pk = ids.parse_pk(given)
        gate = Gate.objects.select_related("run").filter(pk=pk).first() if pk else None
        if gate is None:
            raise CommandError(f"there is no gate {given!r}; `answer_gate` lists the open ones")
        return gate

    def _who(self, username: str | None) -> tuple[str, frozenset[str], int | None]:
        """Who answers: a user with their roles, or the command line (every role: whoever
        runs manage.py holds the database already), who casts no quorum vote."""
        if username is None:
            return ids.user_actor("cli"), frozenset(roles.ROLES), None
        user = User.objects.filter(username=username, is_active=True).first()
        if user is None or not roles.roles(user):
            raise CommandError(f"there is no active user {username!r} with a role")
        return ids.user_actor(user), roles.roles(user), user.pk

    def _data(self, gate: Gate, opts: dict[str, Any]) -> dict[str, Any]:
        """The form as the gate's page would post it: the values shown, then the options."""
        form = answers.form_for(gate)
        data: dict[str, Any] = {}
        for name in form.fields:
            shown = form[name].value()
            if name.startswith("arg_") or shown is None or shown is False:
                continue  # an argument left empty is made as asked
            data[name] = "on" if shown is True else str(shown)
        for item in opts["set"]:
            name, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"--set {item!r}: give a value, as --set NAME=VALUE")
            field = _field(form.fields, name, item)
            if field not in form.fields or field == TICK:
                raise CommandError(f"--set {item!r}: this gate's fields are {_names(form.fields)}")
            data[field] = value
        if opts["decision"]:
            data["decision"] = _decision(form, opts["decision"], data.get("decision"), opts["set"])
        elif gate.kind == GateKind.CONFIRM:
            # The page shows "approve" selected and a person clicks it; a command line that
            # says nothing has not decided to make the call.
            raise CommandError("say --approve or --reject: this gate confirms a call")
        if opts["reason"] is not None:
            said = next((n for n in ("reason", "notes") if n in form.fields), None)
            if said is None:
                raise CommandError("this gate's form takes no reason: give its fields with --set")
            data[said] = opts["reason"]
        edits = [n for n in data if n.startswith("arg_")]  # only --set puts an argument in
        if data.get("decision") == REJECT and edits:
            raise CommandError(
                f"--reject makes no call, so an edit of {', '.join(e[4:] for e in edits)} would "
                "not be recorded: drop the --set, or --approve with it"
            )
        if opts["confirm_act"]:
            data[TICK] = "on"
        elif TICK in form.fields and data.get("decision") == APPROVE:
            # The page's tick, said as this command's flag (the form would say "the tick").
            act = act_of(gate.call)
            raise CommandError(
                f"approving {act.text if act else 'this call'} needs --confirm-act, the tick "
                "that names what it does; nothing was recorded"
            )
        return data

    def _list(self) -> None:
        gates = Gate.objects.filter(status=GateStatus.OPEN).select_related("run")
        rows = list(gates.order_by("created_at", "pk"))
        if not rows:
            self.stdout.write("No gate is waiting for an answer.")
            return
        for gate in rows:
            self.stdout.write(
                f"{gate.pk:>6}  {gate.run.public_id:<10} {gate.stage}/{gate.gate_id}  "
                f"{gate.kind} for {gate.get_role_display().lower()}  {gate.question[:60]!r}  "
                f"digest {gate_digest(gate)}"
            )

    def _show(self, gate: Gate) -> None:
        write = self.stdout.write
        write(f"gate {gate.pk} of {gate.run.public_id} ({gate.run.pipeline}), {gate.status}")
        write(f"at {gate.stage}/{gate.gate_id}: {gate.get_kind_display().lower()}")
        write(f"for {gate.get_role_display().lower()} (a supervisor may answer any gate)")
        write(f"question: {gate.question}")
        if gate.details:
            write("details:\n" + textwrap.indent(gate.details, "  "))
        if gate.kind == GateKind.CONFIRM:
            call = gate.call
            write(f"call: {call.get('tool')} {json.dumps(call.get('args'), ensure_ascii=False)}")
            act = act_of(call)
            if act is not None and act.needs_tick:
                write(f"approving {act.text}: add --confirm-act")
        write("fields (--set NAME=VALUE):")
        form = answers.form_for(gate)
        for name, field in form.fields.items():
            if name == TICK:
                continue
            shown = form[name].value()
            choices = getattr(field, "choices", None)
            options = f" [{'|'.join(str(v) for v, _ in choices)}]" if choices else ""
            write(f"  {_said(form.fields, name)}{options}: {field.help_text or field.label}")
            if shown not in (None, ""):
                write(textwrap.indent(f"shown: {shown}", "      "))
        write(f"digest: {gate_digest(gate)}")


def _said(fields: dict[str, Any], name: str) -> str:
    """A field as --set takes it: an argument by its name, or as arg_<name> where the form
    has a field of that name too (a call's `reason` beside the rejection's)."""
    bare = name.removeprefix("arg_")
    return name if bare != name and bare in fields else bare


def _names(fields: dict[str, Any]) -> str:
    return ", ".join(_said(fields, name) for name in fields if name != TICK)


def _field(fields: dict[str, Any], name: str, item: str) -> str:
    """The form field `--set name=...` sets: the form's own, an argument's (arg_<name>); a
    name that is both is refused, never guessed."""
    if name in fields and f"arg_{name}" in fields:
        raise CommandError(
            f"--set {item!r}: {name} is both the call's argument (--set arg_{name}=...) and "
            f"this form's own field{' (--reason)' if name == 'reason' else ''}: say which"
        )
    return name if name in fields else f"arg_{name}"


def _decision(form: Any, flag: str, given: str | None, sets: list[str]) -> str:
    """--approve or --reject as the form's decision: refused where the form has none, or a
    decision of its own that they are not (a question's "ok"/"stop"), and beside --set
    decision=..., which says it already."""
    field = form.fields.get("decision")
    if field is None:
        raise CommandError("this gate's form has no decision: give its fields with --set")
    if any(item.partition("=")[0] == "decision" for item in sets) and given != flag:
        raise CommandError(f"--{flag} and --set decision={given}: give the decision once")
    choices = [str(value) for value, _ in getattr(field, "choices", [])]
    if choices and flag not in choices:
        raise CommandError(
            f"--{flag}: this question's decision is one of {', '.join(choices)}; "
            "give it with --set decision=..."
        )
    return flag
