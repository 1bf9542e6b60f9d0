"""Small pipelines that ask humans, for the gate tests on real workers. A worker learns of
them through RESUMER_PIPELINES (tests/gates/test_gates_workers.py passes it on), as a user's
own pipeline module would be registered.

The charge is a real HTTP call to the demo service's card processor (settings.DEMO_SERVICE_URL),
so what the target received is read from the target itself (ServiceProcess.charges()). The
meeting goes to a calendar that keeps, as JSON, every request it was sent, in a file of the
test process's media folder (which the workers it starts share): what arrived there, a list
or a string, is read from the calendar itself (`meetings()`).
"""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from django.conf import settings

from runs.models import GateRole, ReplayPolicy
from runs.pipeline import (
    Call,
    Confirm,
    Context,
    KeyParts,
    OnTimeout,
    Pipeline,
    Stage,
    StageOutput,
    Tool,
)
from runs.tools.http import http_tool

ACCOUNT = "acct-gates"
FEE = "5.00"
DEFAULT_ANSWER = {"decision": "approve", "notes": "nobody objected in time"}
FAIL_REASON = "nobody reviewed the release"
# The paths RESUMER_PIPELINES takes for each pipeline below.
PATHS = tuple(
    f"tests.gates.pipelines.{name}"
    for name in (
        "question",
        "two_gates",
        "timeout_default",
        "timeout_failing",
        "charge",
        "quorum",
        "quorum_timeout",
        "charge_learning",
        "detailed",
        "long_question",
        "meeting",
    )
)


def _service_url() -> str:
    return settings.DEMO_SERVICE_URL


def charge_key(ctx: Context, args: dict) -> KeyParts:
    return KeyParts(args["account"], "card", f"{ctx.root_id}/fee", args["reference"])


def charge_tool(confirm: Confirm):
    return http_tool(
        "charge_card",
        ReplayPolicy.NEVER,
        url="/v1/charges",
        base_url=_service_url,
        body=lambda args, key: {
            "account": args["account"],
            "amount": args["amount"],
            "reference": args["reference"],
        },
        key=charge_key,
        external_id="id",
        reconcile="/v1/charges/by-key/{key}",
        target="card processor",
        cost=Decimal(FEE),
        meter="charge",
        verb="charge",
        confirm=confirm,
    )


# Always confirmed, by a supervisor, who may change the amount.
CHARGE = charge_tool(Confirm(role=GateRole.SUPERVISOR, editable=("amount",)))


# --- one question ---------------------------------------------------------------------------


def _go(ctx: Context) -> StageOutput:
    answer = ctx.ask("go", "Go ahead?")
    return StageOutput(outputs={"decision": answer["decision"], "notes": answer.get("notes", "")})


question = Pipeline(
    name="gate-question",
    tools=(),
    stages=(Stage("decide", _go, asks=("go",)),),
)


# --- two questions in one stage -------------------------------------------------------------


def _both(ctx: Context) -> StageOutput:
    first = ctx.ask("first", "First of two: go ahead?")
    second = ctx.ask("second", "Second of two: go ahead?")
    return StageOutput(outputs={"first": first["notes"], "second": second["notes"]})


two_gates = Pipeline(
    name="gate-two",
    tools=(),
    stages=(Stage("decide", _both, asks=("first", "second")),),
)


# --- time-outs ------------------------------------------------------------------------------


def _timed(on_timeout: OnTimeout):
    def stage(ctx: Context) -> StageOutput:
        answer = ctx.ask(
            "go", "Go ahead? (1 s to answer)", timeout=timedelta(seconds=1), on_timeout=on_timeout
        )
        return StageOutput(outputs={"decision": answer["decision"], "notes": answer["notes"]})

    return stage


timeout_default = Pipeline(
    name="gate-timeout-default",
    tools=(),
    stages=(Stage("decide", _timed(OnTimeout.default(DEFAULT_ANSWER)), asks=("go",)),),
)

timeout_failing = Pipeline(
    name="gate-timeout-failing",
    tools=(),
    stages=(Stage("decide", _timed(OnTimeout.failing(FAIL_REASON)), asks=("go",)),),
)


# --- two people must agree -------------------------------------------------------------------


def _two_people(timeout: timedelta | None = None, on_timeout: OnTimeout | None = None):
    def stage(ctx: Context) -> StageOutput:
        answer = ctx.ask(
            "go", "Go ahead? (two people)", quorum=2, timeout=timeout, on_timeout=on_timeout
        )
        return StageOutput(outputs={"decision": answer["decision"], "notes": answer["notes"]})

    return stage


quorum = Pipeline(
    name="gate-quorum",
    tools=(),
    stages=(Stage("decide", _two_people(), asks=("go",)),),
)

# An hour to answer: a test moves the deadline into the past when it wants the time-out.
quorum_timeout = Pipeline(
    name="gate-quorum-timeout",
    tools=(),
    stages=(
        Stage(
            "decide",
            _two_people(timedelta(hours=1), OnTimeout.default(DEFAULT_ANSWER)),
            asks=("go",),
        ),
    ),
)


# --- a confirmed charge ---------------------------------------------------------------------


def _pay(ctx: Context) -> StageOutput:
    # A rejection is not caught: the stage fails with the reviewer's reason.
    charge = ctx.call(
        "fee", "charge_card", account=ACCOUNT, amount=FEE, reference=f"fee of {ctx.run_id}"
    )
    return StageOutput(outputs={"charge_id": charge["external_id"]})


charge = Pipeline(
    name="gate-charge",
    tools=(CHARGE,),
    stages=(Stage("pay", _pay, tools=("charge_card",), calls=(Call("fee", "charge_card"),)),),
)


# --- a charge whose stage learns what the reviewer did ---------------------------------------

EMAIL = """\
**From:** a customer

> Please refund my order.

<script>alert("from the email")</script>
"""


def _pay_and_learn(ctx: Context) -> StageOutput:
    # A rejection is the call's result (on_reject="return"): the stage goes on with it.
    result = ctx.call(
        "fee", "charge_card", account=ACCOUNT, amount=FEE, reference=f"fee of {ctx.run_id}"
    )
    review = ctx.review("fee")
    return StageOutput(
        outputs={
            "result": result,
            "review": {
                "decision": review.decision,
                "by": review.by,
                "reason": review.reason,
                "edits": review.edits,
                "at": review.at.isoformat() if review.at else "",
            },
        }
    )


charge_learning = Pipeline(
    name="gate-charge-learning",
    tools=(
        charge_tool(
            Confirm(
                role=GateRole.SUPERVISOR,
                editable=("amount",),
                on_reject="return",
                description="The **customer's fee**, as agreed.",
            )
        ),
    ),
    stages=(
        Stage("pay", _pay_and_learn, tools=("charge_card",), calls=(Call("fee", "charge_card"),)),
    ),
)


# --- a question with details, and one too long for a heading --------------------------------


def _reply(ctx: Context) -> StageOutput:
    answer = ctx.ask("reply", "Send the reply to this email?", details=EMAIL)
    return StageOutput(outputs={"decision": answer["decision"]})


detailed = Pipeline(
    name="gate-detailed",
    tools=(),
    stages=(Stage("decide", _reply, asks=("reply",)),),
)


def _long(ctx: Context) -> StageOutput:
    ctx.ask("reply", "Send this reply? " + EMAIL * 10)
    return StageOutput()


long_question = Pipeline(
    name="gate-long-question",
    tools=(),
    stages=(Stage("decide", _long, asks=("reply",)),),
)


# --- a confirmed meeting with a list of attendees -------------------------------------------

ATTENDEES = ["pm@client.com", "lance@company.com"]


def calendar_file() -> Path:
    return Path(settings.MEDIA_ROOT) / "calendar.jsonl"


def _book(args: dict, key: str) -> dict:
    """The calendar: it keeps each request as the JSON it received."""
    path = calendar_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as calendar:
        calendar.write(json.dumps({"key": key, "args": args}) + "\n")
    return {"external_id": f"mtg-{key[:12]}"}


def meetings(key: str) -> list[dict]:
    """What the calendar received under a delivery key: the arguments of each request."""
    if not calendar_file().exists():
        return []
    lines = [json.loads(line) for line in calendar_file().read_text().splitlines()]
    return [line["args"] for line in lines if line["key"] == key]


def meeting_key(ctx: Context, args: dict) -> KeyParts:
    return KeyParts(ACCOUNT, "calendar", f"{ctx.root_id}/meeting", "v1")


# No `args` model: the attendees are edited as the JSON type the stage asked with, a list.
SCHEDULE = Tool(
    "schedule_meeting",
    ReplayPolicy.NEVER,
    _book,
    key=meeting_key,
    verb="schedule",
    confirm=Confirm(editable=("attendees", "title")),
)


def _meet(ctx: Context) -> StageOutput:
    booked = ctx.call(
        "meeting",
        "schedule_meeting",
        title="Kick-off",
        attendees=list(ATTENDEES),
        organizer=ctx.run_id,
    )
    return StageOutput(outputs={"meeting_id": booked["external_id"]})


meeting = Pipeline(
    name="gate-meeting",
    tools=(SCHEDULE,),
    stages=(
        Stage(
            "meet", _meet, tools=("schedule_meeting",), calls=(Call("meeting", "schedule_meeting"),)
        ),
    ),
)
