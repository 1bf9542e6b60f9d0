"""The last 500s gone, and a tampered artifact never served. A fuzz pass over every form and query parameter the product takes: big integers, another
script's digits, signs, empty, huge, a NUL. Each answer is the product's own 2xx/3xx/4xx with
a message, never a 500, for the supervisor (who sees every page and form) against a database
that has a run of every kind. Production settings: DEBUG off, errors not raised at the test."""

from __future__ import annotations

import pytest
from django.test import Client

from runs.access import roles
from runs.ledger import artifacts
from runs.models import Artifact, Checkpoint, Effect, GroupApproval, Run
from tests.support.plans import stopped_with_plan, tampered

pytestmark = pytest.mark.django_db(transaction=True)

NASTY = [
    "9223372036854775808",
    "9" * 30,
    "١٢",
    "²",
    "-1",
    "0",
    "1.5",
    "",
    "x" * 5000,
    "run-\x00",
    "\u202e",
]


@pytest.fixture
def stocked(facts, redis_conn) -> dict:
    run = stopped_with_plan({"timeout": "publish/promote-charge/after"})
    effect = Effect.objects.get(run=run, call_id="promote-charge")
    artifact = Artifact.objects.filter(run=run).first()
    return {"run": run, "effect": effect, "artifact": artifact}


@pytest.fixture
def supervisor() -> Client:
    user, _ = roles.ensure_user("fuzz-supervisor", "fuzz-pass-123456", roles.SUPERVISOR)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def get_pages(stocked: dict) -> list[tuple[str, list[str]]]:
    run, effect, artifact = stocked["run"], stocked["effect"], stocked["artifact"]
    return [
        ("/runs/", ["q", "status", "pipeline", "stage", "reason", "after", "notice"]),
        (f"/runs/{run.public_id}/", ["after"]),
        (f"/runs/{run.public_id}/timeline/", ["after"]),
        (f"/runs/{run.public_id}/plan/", ["after"]),
        ("/pipelines/content/", ["runs"]),
        (f"/runs/artifacts/{artifact.pk}/", ["x"]),
        ("/admin/runs/run/", ["q", "p", "o", "status__exact", "id"]),
        ("/admin/runs/effect/", ["q", "p", "o", "status__exact", "run__id__exact"]),
        ("/admin/runs/event/", ["q", "p", "type__exact", "run__id__exact"]),
        (f"/admin/runs/effect/{effect.pk}/change/", ["_changelist_filters"]),
        ("/api/v1/runs", ["after", "limit", "notice", "status", "q"]),
        (f"/api/v1/runs/{run.public_id}/events", ["after", "limit"]),
        ("/api/v1/gates", ["after", "limit"]),
    ]


def test_no_query_parameter_value_is_a_500(stocked, supervisor):
    found = []
    for path, params in get_pages(stocked):
        for name in params:
            for value in NASTY:
                status = supervisor.get(path, {name: value}).status_code
                if status >= 500:
                    found.append((path, name, value[:20], status))
    assert found == []


@pytest.mark.parametrize(
    "path",
    [
        "/runs/run-9223372036854775808/",
        "/runs/artifacts/9223372036854775808/",
        "/runs/artifacts/9223372036854775808/raw/",
        "/admin/runs/run/9223372036854775808/change/",
        "/admin/runs/effect/99999999999999999999999/change/",
        "/admin/runs/event/-1/change/",
        "/admin/runs/checkpoint/%00/change/",
        "/admin/runs/gate/9223372036854775808/change/",
        # Rows keyed by their run: no range check on the key, and SQLite's 64 bits.
        "/admin/runs/lease/9223372036854775808/change/",
        "/admin/runs/lease/9223372036854775808/history/",
        "/admin/runs/storedplan/9223372036854775808/change/",
        "/admin/runs/storedplan/9223372036854775808/history/",
        "/runs/batches/" + "f" * 32 + "/",
        "/runs/groups/" + "f" * 64 + "/",
    ],
)
def test_an_out_of_range_id_in_a_path_is_a_404_or_a_redirect_never_a_500(stocked, supervisor, path):
    # A NUL in the path is a 400 with a message (runs/middleware.py RejectNulMiddleware).
    assert supervisor.get(path).status_code in (302, 400, 404)


def test_no_form_field_value_is_a_500(stocked, supervisor):
    run, effect = stocked["run"], stocked["effect"]
    forms = [
        (f"/runs/{run.public_id}/approve/", ["action", "fingerprint", "confirm"]),
        (f"/runs/{run.public_id}/plan/check/", ["x"]),
        (f"/admin/runs/effect/{effect.pk}/change/", ["status", "external_id", "error", "reason"]),
        ("/login/", ["username", "password"]),
    ]
    found = []
    for path, fields in forms:
        for name in fields:
            for value in NASTY:
                status = supervisor.post(path, {name: value}).status_code
                if status >= 500:
                    found.append((path, name, value[:20], status))
    assert found == []
    assert GroupApproval.objects.count() == 0


def test_a_tampered_artifact_is_never_served_as_if_it_were_good(stocked, supervisor):
    run = stocked["run"]
    image = next(
        a for a in Checkpoint.objects.get(run=run, stage="visual").artifacts if "cover" in a["name"]
    )
    artifact = artifacts.get(image["uri"])
    with tampered(image["uri"], "alter"):
        raw = supervisor.get(f"/runs/artifacts/{artifact.pk}/raw/")
        page = supervisor.get(f"/runs/artifacts/{artifact.pk}/")

    assert raw.status_code == 404
    assert b"data-tampered" not in raw.content
    assert page.status_code == 200 and b"altered" in page.content.lower()


def test_a_nul_character_is_a_400_that_says_so_and_changes_nothing(stocked, supervisor):
    run = stocked["run"]
    before = run.last_seq

    query = supervisor.get("/admin/runs/run/", {"q": "run-\x00"})
    form = supervisor.post(f"/runs/{run.public_id}/approve/", {"fingerprint": "a\x00"})

    for response in (query, form):
        assert response.status_code == 400
        assert b"NUL character is not accepted" in response.content
    run.refresh_from_db()
    assert run.last_seq == before


def test_a_form_whose_bytes_are_not_utf8_is_a_400_and_changes_nothing(stocked, supervisor):
    # Read as Django reads it, the broken bytes were U+FFFD, and recorded as what was sent.
    run = stocked["run"]
    before = run.last_seq

    response = supervisor.post(
        f"/runs/{run.public_id}/approve/",
        b"fingerprint=o%ED%A0%80k",
        content_type="application/x-www-form-urlencoded",
    )

    assert response.status_code == 400
    assert b"not UTF-8 text; nothing was recorded" in response.content
    run.refresh_from_db()
    assert run.last_seq == before


# --- JSON bodies ------------------------------------------------------------------------------

# Text no database stores, as JSON writes it: a NUL and a lone surrogate.
UNSTORABLE = ["a\\u0000b", "\\ud800", "x\\udfffy"]


def json_operations(stocked: dict, client: Client) -> list[str]:
    """Every API operation that takes a JSON body, its path filled in with real ids: read
    from the served OpenAPI schema, so an operation added later is fuzzed too."""
    run = stocked["run"]
    schema = client.get("/api/v1/openapi.json").json()
    fills = {
        "run_id": run.public_id,
        "gate_id": "1",
        "fingerprint": "f" * 64,
        "batch_id": "1",
        "effect_id": "1",
    }
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method == "post" and "requestBody" in operation:
                for name, value in fills.items():
                    path = path.replace("{" + name + "}", value)
                assert "{" not in path, f"no id to fill {path} with"
                found.append(path)
    return found


def test_no_json_body_is_a_500_and_unstorable_text_is_a_400_problem(stocked, supervisor):
    run = stocked["run"]
    before = run.last_seq
    operations = json_operations(stocked, supervisor)
    assert len(operations) >= 5
    found = []
    for path in operations:
        for text in UNSTORABLE:
            for body in (
                f'{{"input": {{"topic": "{text}"}}, "reason": "{text}", "fields": {{"a": "{text}"}}}}',
                f'{{"{text}": 1}}',
                f'["{text}"]',
            ):
                response = supervisor.post(path, body, content_type="application/json")
                said = response.content.decode(errors="replace")
                if response.status_code != 400 or "NUL character" not in said:
                    found.append((path, body[:40], response.status_code, said[:80]))
        for body in ('{"input": 99999999999999999999999999}', '{"a": [[[[[]]]]]}', "{", '"x"'):
            response = supervisor.post(path, body, content_type="application/json")
            if response.status_code >= 500:
                found.append((path, body[:40], response.status_code))
        # Nested past Python's recursion (a 500 in the parser) and past pydantic's
        # serializer (a 500 as the answer was recorded): refused, and said why.
        for depth in (300, 2000):
            body = '{"answer": ' + "[" * depth + "]" * depth + ', "digest": "x"}'
            response = supervisor.post(path, body, content_type="application/json")
            if response.status_code != 400 or "nested deeper than" not in response.json()["detail"]:
                found.append((path, depth, response.status_code))
    assert found == []
    run.refresh_from_db()
    assert run.last_seq == before


def test_a_forms_address_opened_in_the_address_bar_is_a_page_that_says_so(stocked, supervisor):
    run = stocked["run"]

    response = supervisor.get(f"/runs/{run.public_id}/approve/")

    assert (response.status_code, response.headers["Allow"]) == (405, "POST")
    assert "is where a form's button sends its answer" in response.content.decode()
    assert supervisor.get("/api/v1/runs/" + run.public_id + "/approve").status_code == 405


def test_a_form_too_large_to_read_is_a_page_that_says_so_and_changes_nothing(stocked, supervisor):
    run = stocked["run"]
    before = Run.objects.get(pk=run.pk).last_seq

    response = supervisor.post(f"/runs/{run.public_id}/close/", {"reason": "x" * (3 * 1024 * 1024)})

    assert response.status_code == 400
    assert "larger than the 2.5 MB a page takes" in response.content.decode()
    assert Run.objects.get(pk=run.pk).last_seq == before
    # The same page answers any request Django refuses to read, a foreign Host header too.
    assert supervisor.get("/runs/", HTTP_HOST="evil.invalid").status_code == 400
