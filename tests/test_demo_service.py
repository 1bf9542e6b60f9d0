"""The demo service as its clients see it over HTTP: prices, idempotency, lookups, faults and
the process being down. The HTTP tool's side is in test_http_tool.py."""

from __future__ import annotations

import httpx
import pytest

KEY = "k-" + "a" * 62


def post(service, path: str, body: dict, key: str = "") -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return httpx.post(f"{service.url}{path}", json=body, headers=headers, trust_env=False)


def get(service, path: str, **params: str) -> httpx.Response:
    return httpx.get(f"{service.url}{path}", params=params, trust_env=False)


ARTICLE = {"account": "acct-42", "platform": "devblog", "title": "T", "body": "B"}


def test_each_system_bills_at_the_simulators_prices(demo_service):
    post(demo_service, "/v1/renders", {"prompt": "cover"}, "r")
    post(demo_service, "/v1/assets", {"name": "cover", "content": "<svg/>"}, "u")
    post(demo_service, "/v1/articles", {**ARTICLE, "delivery_key": "p"})
    post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "5.00"}, "c")

    costs = {row["op"]: row["cost"] for row in demo_service.meter()}
    assert costs == {
        "render": "0.0400",
        "upload": "0.0010",
        "publish": "0.0000",
        "charge": "5.0000",
    }


def test_a_replay_says_so_and_returns_the_first_answer(demo_service):
    first = post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "5.00"}, KEY)
    again = post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "5.00"}, KEY)

    assert first.headers["Idempotent-Replayed"] == "false"
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert len(demo_service.charges()) == 1


def test_a_key_reused_with_a_different_request_is_409_and_executes_nothing(demo_service):
    post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "5.00"}, KEY)
    reused = post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "9.00"}, KEY)

    assert reused.status_code == 409
    assert reused.json()["error"]["message"] == "key reused with a different request"
    assert [c["amount"] for c in demo_service.charges()] == ["5.00"]


def test_a_key_reused_on_another_endpoint_is_409(demo_service):
    post(demo_service, "/v1/renders", {"prompt": "cover"}, KEY)

    assert post(demo_service, "/v1/assets", {"name": "x", "content": "y"}, KEY).status_code == 409


def test_an_invalid_request_is_400_and_does_not_use_up_its_key(demo_service):
    bad = post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "-1"}, KEY)
    good = post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "1.00"}, KEY)

    assert bad.status_code == 400
    assert good.status_code == 201 and good.headers["Idempotent-Replayed"] == "false"


def test_the_platform_does_not_deduplicate_publishes(demo_service):
    post(demo_service, "/v1/articles", {**ARTICLE, "delivery_key": "p"}, "p")
    post(demo_service, "/v1/articles", {**ARTICLE, "delivery_key": "p"}, "p")

    assert len(demo_service.articles(delivery_key="p")) == 2


def test_article_lookup_finds_a_hand_published_article_by_content_hash(demo_service):
    by_hand = post(demo_service, "/v1/articles", ARTICLE).json()

    found = get(demo_service, f"/v1/articles/by-key/{KEY}", content_hash=by_hand["content_hash"])
    missing = get(demo_service, f"/v1/articles/by-key/{KEY}")

    assert found.status_code == 200 and found.json()["id"] == by_hand["id"]
    assert missing.status_code == 404


def test_a_fault_for_one_key_leaves_other_calls_alone(demo_service):
    demo_service.arm("render", "error", key=KEY)

    other = post(demo_service, "/v1/renders", {"prompt": "cover"}, "other-key")
    hit = post(demo_service, "/v1/renders", {"prompt": "cover"}, KEY)
    again = post(demo_service, "/v1/renders", {"prompt": "cover"}, KEY)

    assert (other.status_code, hit.status_code, again.status_code) == (201, 503, 201)
    assert demo_service.faults()[0]["remaining"] == 0


@pytest.mark.parametrize(
    "spec",
    [
        {"op": "publish", "mode": "explode"},
        {"op": "teleport", "mode": "drop"},
        {"op": "publish", "mode": "delay"},
        {"op": "publish", "mode": "error", "status": 404},
        {"op": "publish", "mode": "drop", "times": 0},
        {"op": "publish", "mode": "drop", "colour": "red"},
    ],
)
def test_a_bad_fault_is_refused_and_nothing_is_armed(demo_service, spec):
    response = post(demo_service, "/_faults", spec)

    assert response.status_code == 400
    assert demo_service.faults() == []


def test_down_refuses_connections_and_start_keeps_the_data(demo_service):
    post(demo_service, "/v1/renders", {"prompt": "cover"}, KEY)
    demo_service.stop()

    with pytest.raises(httpx.ConnectError):
        get(demo_service, "/_health")
    demo_service.start()

    assert demo_service.count("render", KEY) == 1
