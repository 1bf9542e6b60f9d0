"""The protocol's vocabulary (runs/events.py), checked the way Zulip's test_events.py checks
its events against their schemas: every writer builds its event through its class, every
payload shape a database may hold reads into its class, and nothing else in runs/ reads a
payload by key."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.events import CLASSES, RunEvent, read, summarize
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.reopen import ask_again
from runs.ledger import artifacts
from runs.models import Effect, Event, EventType, Gate
from runs.planning.close_out import close_out
from runs.planning.target_lookup import ask_target, record_answer
from tests.support.plans import charge_unknown, interrupted_with_plan, resumed_inline

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "runs"
# Captured from the code before the classes, one per shape, beside the shapes earlier code
# wrote (each record says which code wrote it).
STORED = json.loads((Path(__file__).parent / "support" / "stored_events.json").read_text())


def test_every_event_type_has_its_class():
    assert sorted(CLASSES) == sorted(EventType.values)
    assert all(cls.type == kind for kind, cls in CLASSES.items())


# --- every shape a database may hold ---------------------------------------------------------


def _row(record: dict, payload: dict, payload_ref: str = "") -> Event:
    return Event(
        type=record["type"],
        stage=record["stage"],
        payload=payload,
        payload_ref=payload_ref,
        inputs=record["inputs"],
        artifacts=record["artifacts"],
        idempotency_key=record["idempotency_key"],
    )


def _assert_holds(said: RunEvent, record: dict, payload: dict) -> None:
    """Every key of `payload` its class knows is in its field; the row's columns too."""
    assert type(said) is CLASSES[record["type"]]
    for key, name in type(said).payload_keys().items():
        if key in payload:
            assert getattr(said, name) == payload[key], key
    assert (said.stage, said.idempotency_key) == (record["stage"], record["idempotency_key"])
    if "input_versions" in type(said).__dataclass_fields__:
        assert said.input_versions == record["inputs"]


@pytest.mark.parametrize(
    "record", STORED, ids=[f"{n}-{r['type']}" for n, r in enumerate(STORED, start=1)]
)
def test_every_stored_shape_reads_into_its_class(record, db):
    if "stored" not in record:
        said = read(_row(record, record["payload"]))
        _assert_holds(said, record, record["payload"])
        if record.get("current"):  # what today's code writes comes back as it was written
            assert said.to_payload() == record["payload"]
        return
    # A payload stored as an artifact: its artifact, and the row that names it.
    whole = record["stored"]
    uri = artifacts.store("payload/test", json.dumps(whole).encode(), "application/json").uri
    row = _row(record, {**record["payload"], "stored_as": uri}, uri)
    said = read(row, whole=True)
    _assert_holds(said, record, whole)
    if record.get("current"):
        assert said.to_payload() == whole
    # What its row shows: its summary, or (stored before summaries) one made from it now.
    _assert_holds(read(row), record, record["payload"].get("summary") or summarize(whole))


def test_a_stored_payload_whose_artifact_is_gone_reads_as_nothing_but_refuses_whole(db):
    row = Event(type=EventType.VERIFIED, payload={"stored_as": "artifact://gone/v1", "bytes": 9})
    assert read(row).manifest_sha256 == ""
    with pytest.raises(LookupError, match="not in the artifact table"):
        read(row, whole=True)


# --- every writer ------------------------------------------------------------------------------


def _world() -> None:
    """Runs that between them write most event types, through the engine, the planner, the
    gates and the ways out, in this process (seed_demo.run_inline): a resumed publish found
    on the platform, a reviewed run whose charge the card refused and was asked again, an
    unknown charge whose target was asked and recorded, a lost run closed out."""
    resumed_inline({"timeout": "publish/publish/after"})
    run = run_inline(engine.start_run("content", {"review": "on"}, actor="test", enqueue=False).pk)
    review = Gate.objects.get(run=run, gate_id="review")
    answers.answer(review.pk, review.initial, actor="ana", roles=frozenset({"operator"}))
    run = run_inline(run.pk)
    charge = Gate.objects.get(run=run, gate_id="promote-charge")
    over = {"decision": "approve", "arg_amount": "75.00", TICK: "on"}
    answers.answer(charge.pk, over, actor="sam", roles=frozenset({"supervisor"}))
    run_inline(run.pk)
    ask_again(run.pk, actor="user:ana")
    unknown = Effect.objects.get(run=charge_unknown(), call_id="promote-charge")
    record_answer(unknown.pk, ask_target(unknown.pk, actor="user:sam").seq, actor="user:sam")
    close_out(interrupted_with_plan().pk, "nobody needs it", actor="user:ana")


@pytest.mark.django_db(transaction=True)
def test_every_event_the_writers_write_reads_back_as_written(facts, demo_service):
    _world()
    events = list(Event.objects.order_by("id"))
    for event in events:
        said = read(event, whole=True)
        assert type(said) is CLASSES[event.type], event
        if event.payload_ref:
            assert said.to_payload() == json.loads(artifacts.read(event.payload_ref)), event
        else:
            assert said.to_payload() == event.payload, event
    written = {event.type for event in events}
    assert written >= set(EventType.values) - {
        # Written by the same append path, their shapes read above from the fixture.
        EventType.NEEDS_APPROVAL,
        EventType.BRANCHED,
        EventType.PLAN_DEVIATED,
        EventType.ACKNOWLEDGED,
        # A stage run again in the same run (tests/execution/test_reentry_workers.py).
        EventType.DIVERGED,
        EventType.VALUE_RECORDED,
    }


def _modules(*packages: str) -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(ROOT).as_posix(), ast.parse(path.read_text()))
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


CLASS_NAMES = frozenset(cls.__name__ for cls in CLASSES.values()) | {"RunEvent"}
# Calls that hand an event on: a copy with more fields, built inside the event's transaction.
PASSING = frozenset({"with_more", "replace"})


def _functions(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            yield node


def _annotated_event(arg: ast.arg) -> bool:
    """A parameter whose annotation names a class of the vocabulary (or a type of one)."""
    text = ast.unparse(arg.annotation) if arg.annotation else ""
    return any(name in text for name in CLASS_NAMES)


def _builders(tree: ast.Module) -> frozenset[str]:
    """The module's functions and methods that return an event of the vocabulary (by their
    return annotation)."""
    return frozenset(
        fn.name
        for fn in _functions(tree)
        if fn.returns is not None and any(c in ast.unparse(fn.returns) for c in CLASS_NAMES)
    )


def _through_a_class(value: ast.expr, fn: ast.FunctionDef, builders=frozenset()) -> bool:
    """Whether `value` is an event built by its class: a class's call, a call of a function
    that returns one (`builders`), such a call passed on, a parameter annotated with a class,
    or a local name bound to one of these."""
    params = {a.arg: a for a in [*fn.args.args, *fn.args.kwonlyargs]}
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return value.func.attr in builders
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        name = value.func.id
        if name in CLASS_NAMES or name in builders:
            return True
        if name in params and _annotated_event(params[name]):
            return True
        if name in PASSING and value.args:
            return _through_a_class(value.args[0], fn, builders)
        return False
    if isinstance(value, ast.Name):
        if value.id in params:
            return _annotated_event(params[value.id])
        bound = [
            node.value
            for node in ast.walk(fn)
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets)
        ]
        return bool(bound) and all(_through_a_class(v, fn, builders) for v in bound)
    return False


def _writes(packages: tuple[str, ...]):
    """Every call of the append path's two writers, with its function and the module's
    event builders."""
    for name, tree in _modules(*packages):
        builders = _builders(tree)
        for fn in _functions(tree):
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("append", "create_run")
                    and len(node.args) >= 2
                ):
                    yield f"{name}:{node.lineno}", node, fn, builders


def test_every_append_site_builds_its_event_through_its_class():
    sites = list(_writes(("runs", "demo")))
    raw = [where for where, node, fn, made in sites if not _through_a_class(node.args[1], fn, made)]
    assert raw == []
    # The search sees the writers: a check that finds none proves nothing.
    assert len(sites) >= 25


def test_a_raw_payload_is_what_the_writers_check_finds():
    tree = ast.parse(
        "def w(writer, event: ToolCalled):\n"
        "    append(writer, {'call': 'c'})\n"
        "    payload = {'call': 'c'}\n"
        "    append(writer, payload)\n"
        "    append(writer, ToolCalled(call='c'))\n"
        "    append(writer, event)\n"
    )
    fn = next(_functions(tree))
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func) == "append"]
    assert [_through_a_class(c.args[1], fn) for c in calls] == [False, False, True, True]


# --- nothing else reads a payload by key -----------------------------------------------------

# The vocabulary itself, and the vendor SQL that writes the rows.
EXEMPT = ("runs/events.py", "runs/ledger/sql/")
# JSON in raw SQL: a key of a JSON column.
JSON_SQL = ("json_extract", "->>", "payload__")


def _named_payload(node: ast.expr) -> bool:
    """An expression that holds a stored payload, or a part of one, by its name: `payload`,
    `event.payload`, `row["payload"]`, `row.get("payload")`, `(payload or {})`, and what is
    read from them."""
    if isinstance(node, ast.Name):
        return "payload" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return node.attr == "payload"
    if isinstance(node, ast.BoolOp):
        return any(_named_payload(value) for value in node.values)
    if isinstance(node, ast.Subscript):
        key = node.slice.value if isinstance(node.slice, ast.Constant) else None
        return key == "payload" or _named_payload(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        key = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        return node.func.attr == "get" and (key == "payload" or _named_payload(node.func.value))
    return False


def payload_reads(tree: ast.Module) -> list[int]:
    """Lines that read a payload by key (payload["k"], payload.get("k")) or query a payload's
    keys (payload__k=…, a JSON path in SQL)."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
            and _named_payload(node.value)
        ) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and _named_payload(node.func.value)
        ):
            found.append(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg and "payload__" in node.arg:
            found.append(node.value.lineno)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and any(marker in node.value for marker in JSON_SQL)
        ):
            found.append(node.lineno)
    return found


def test_no_payload_is_read_by_key_outside_the_vocabulary():
    reads = [
        f"{name}:{line}"
        for name, tree in _modules("runs")
        if not name.startswith(EXEMPT)
        for line in payload_reads(tree)
    ]
    assert reads == []


def test_the_count_finds_every_kind_of_payload_read():
    tree = ast.parse(
        "payload['call']\n"
        "event.payload.get('x')\n"
        "Event.objects.filter(payload__gate=1)\n"
        "sql = \"json_extract(e.payload, '$.cost')\"\n"
        "row['payload']['reason']\n"
        "(opened or {}).get('payload', {}).get('timeout_seconds')\n"
        "shown = read(event).call\n"
    )
    assert sorted(set(payload_reads(tree))) == [1, 2, 3, 4, 5, 6]
