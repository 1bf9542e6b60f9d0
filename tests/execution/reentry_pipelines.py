"""Pipelines whose stage runs again in the same run (after a gate's answer, after a crash),
for the replay tests on real workers (tests/execution/test_reentry_workers.py). A worker
learns of them through RESUMER_PIPELINES, as a user's own pipeline module is registered.

Their targets keep their own state: the calendar and the mailbox are files in the test's
media folder (which the workers it starts share), one JSON line per request they served, so
what a stage read or sent is counted at the target; the model is the demo service's chat
endpoint, whose meter counts the completions it billed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings

from demo.pipeline import MODEL_PRICES
from runs.models import ReplayPolicy
from runs.pipeline import (
    Call,
    Confirm,
    Context,
    KeyParts,
    OnDivergence,
    Pipeline,
    Stage,
    StageOutput,
    Tool,
)
from runs.tools.model import model_tool

PATHS = tuple(
    f"tests.execution.reentry_pipelines.{name}"
    for name in ("reads", "loop", "clock", "recorded_clock", "clock_recorded_anyway")
)
MODEL = "demo-writer"


def target_file(name: str) -> Path:
    return Path(settings.MEDIA_ROOT) / f"{name}.jsonl"


def served(name: str) -> list[dict]:
    """Every request the target `name` served, in order."""
    path = target_file(name)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _serve(name: str, entry: dict) -> int:
    path = target_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as log:
        log.write(json.dumps(entry) + "\n")
    return len(served(name))


def _read_calendar(args: dict, key: str) -> dict:
    """The calendar answers with its free slots, and how many reads it has served: a stage
    that read it again would see another answer than the one its reviewer saw."""
    reads = _serve("calendar-reads", {"day": args["day"]})
    return {
        "day": args["day"],
        "free": [f"{args['day']} 10:00", f"{args['day']} 15:00"],
        "read": reads,
    }


def _book(args: dict, key: str) -> dict:
    _serve("bookings", {"key": key, "slot": args["slot"]})
    return {"external_id": f"mtg-{key[:10]}"}


def _send(args: dict, key: str) -> dict:
    _serve("mailbox", {"key": key, "to": args["to"], "body": args["body"]})
    return {"external_id": f"mail-{key[:10]}"}


def _key(kind: str):
    def key(ctx: Context, args: dict) -> KeyParts:
        return KeyParts(
            "acct-reentry", kind, f"{ctx.root_id}/{kind}", json.dumps(args, sort_keys=True)
        )

    return key


TOOLS = (
    Tool("read_calendar", ReplayPolicy.SAFE, _read_calendar, verb="read"),
    Tool(
        "book_meeting",
        ReplayPolicy.IDEMPOTENT,
        _book,
        key=_key("calendar"),
        verb="book",
        confirm=Confirm(),
    ),
    Tool(
        "send_email",
        ReplayPolicy.IDEMPOTENT,
        _send,
        key=_key("mailbox"),
        verb="send",
        confirm=Confirm(),
    ),
    model_tool(
        "model",
        base_url=lambda: f"{settings.DEMO_SERVICE_URL}/v1",
        api_key_env="DEMO_MODEL_API_KEY",
        prices=MODEL_PRICES,
        read_timeout=5,
        target="language model",
        account=lambda ctx: "acct-reentry",
    ),
)
TOOL_NAMES = tuple(t.name for t in TOOLS)


# --- two reads and two confirmations --------------------------------------------------------


def _reads(ctx: Context) -> StageOutput:
    monday = ctx.call("read-1", "read_calendar", day="mon")
    ctx.call("book", "book_meeting", slot=monday["free"][0])
    tuesday = ctx.call("read-2", "read_calendar", day="tue")
    ctx.call("send", "send_email", to="pm@client.com", body=f"Booked {monday['free'][0]}")
    return StageOutput(outputs={"reads_seen": [monday["read"], tuesday["read"]]})


READS_CALLS = (
    Call("read-1", "read_calendar"),
    Call("book", "book_meeting"),
    Call("read-2", "read_calendar"),
    Call("send", "send_email"),
)
reads = Pipeline(
    name="reentry-reads",
    tools=TOOLS,
    stages=(Stage("work", _reads, tools=TOOL_NAMES, calls=READS_CALLS),),
)


# --- a model loop between the reads and the confirmations ----------------------------------


def _turn(ctx: Context, call_id: str, content: str) -> str:
    reply = ctx.call(call_id, "model", model=MODEL, messages=[{"role": "user", "content": content}])
    return reply["content"]


def _loop(ctx: Context) -> StageOutput:
    monday = ctx.call("read-1", "read_calendar", day="mon")
    plan = _turn(ctx, "turn-1", f"Pick a slot among {monday['free']}")
    ctx.call("book", "book_meeting", slot=monday["free"][0])
    tuesday = ctx.call("read-2", "read_calendar", day="tue")
    body = _turn(ctx, "turn-2", f"Write the invitation for {monday['free'][0]} ({plan[:20]})")
    ctx.call("send", "send_email", to="pm@client.com", body=body[:200])
    return StageOutput(outputs={"reads_seen": [monday["read"], tuesday["read"]]})


loop = Pipeline(
    name="reentry-loop",
    tools=TOOLS,
    stages=(
        Stage(
            "work",
            _loop,
            tools=TOOL_NAMES,
            calls=(
                *READS_CALLS[:1],
                Call("turn-1", "model"),
                *READS_CALLS[1:3],
                Call("turn-2", "model"),
                READS_CALLS[3],
            ),
        ),
    ),
)


# --- a clock in the prompt ---------------------------------------------------------------------


def _clocked(now) -> object:
    def stage(ctx: Context) -> StageOutput:
        draft = _turn(ctx, "turn-1", f"It is {now(ctx).isoformat()}. Draft a reply.")
        ctx.call("send", "send_email", to="pm@client.com", body=draft[:200])
        return StageOutput(outputs={"draft": draft})

    return stage


CLOCK_CALLS = (Call("turn-1", "model"), Call("send", "send_email"))

# As the ported agent wrote it: the wall clock, read again whenever the stage runs.
clock = Pipeline(
    name="reentry-clock",
    tools=TOOLS,
    stages=(
        Stage(
            "draft", _clocked(lambda ctx: datetime.now(UTC)), tools=TOOL_NAMES, calls=CLOCK_CALLS
        ),
    ),
)
# The recorded clock: the same instant whenever the stage runs in this run.
recorded_clock = Pipeline(
    name="reentry-recorded-clock",
    tools=TOOLS,
    stages=(Stage("draft", _clocked(lambda ctx: ctx.now()), tools=TOOL_NAMES, calls=CLOCK_CALLS),),
)


def _draft_then_ask(ctx: Context) -> StageOutput:
    draft = _turn(ctx, "turn-1", f"It is {datetime.now(UTC).isoformat()}. Draft a note.")
    ctx.ask("go", "File the note?")
    return StageOutput(outputs={"draft": draft})


# The wall clock again, in a pipeline that chose to record a divergence and go on (before a
# plain question: before a confirmation of what the model wrote, each re-entry would write
# another text, and ask about it again).
clock_recorded_anyway = Pipeline(
    name="reentry-clock-anyway",
    tools=TOOLS,
    on_divergence=OnDivergence.RECORD,
    stages=(
        Stage("draft", _draft_then_ask, tools=TOOL_NAMES, calls=CLOCK_CALLS[:1], asks=("go",)),
    ),
)
