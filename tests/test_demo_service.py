"""The demo service as its clients see it over HTTP: prices, idempotency, lookups, faults and
the process being down. The HTTP tool's side is in test_http_tool.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from demo_service.process import ROOT, ServiceClient, free_port
from tests.support.processes import wait_for

KEY = "k-" + "a" * 62


def post(service, path: str, body: dict, key: str = "") -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return httpx.post(f"{service.url}{path}", json=body, headers=headers, trust_env=False)


def get(service, path: str, **params: str) -> httpx.Response:
    return httpx.get(f"{service.url}{path}", params=params, trust_env=False)


ARTICLE = {"account": "acct-42", "platform": "devblog", "title": "T", "body": "B"}


def test_each_system_bills_at_its_price(demo_service):
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


def test_a_charge_over_the_accounts_limit_is_declined_with_402_and_charges_nothing(demo_service):
    demo_service.set_limit("acct-42", "20.00")

    over = post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "20.01"}, KEY)

    assert over.status_code == 402
    assert over.json()["error"]["type"] == "card_declined"
    assert "over the limit of 20.00" in over.json()["error"]["message"]
    assert demo_service.charges() == []
    assert demo_service.count("charge", outcome="declined") == 1


def test_a_declined_charge_goes_through_under_its_key_once_the_limit_allows_it(demo_service):
    demo_service.set_limit("acct-42", "1.00")
    post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "5.00"}, KEY)
    demo_service.set_limit("acct-42", "10.00")

    again = post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "5.00"}, KEY)

    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "false"
    assert [c["amount"] for c in demo_service.charges()] == ["5.00"]


def test_an_account_without_a_limit_of_its_own_has_the_default_one(demo_service):
    at_limit = post(demo_service, "/v1/charges", {"account": "acct-9", "amount": "50.00"}, "a")
    over = post(demo_service, "/v1/charges", {"account": "acct-9", "amount": "50.01"}, "b")

    assert (at_limit.status_code, over.status_code) == (201, 402)


def test_a_limit_that_is_not_an_amount_is_400_and_sets_nothing(demo_service):
    bad = httpx.post(
        f"{demo_service.url}/_limits",
        json={"account": "acct-42", "limit": "lots"},
        trust_env=False,
    )

    assert bad.status_code == 400
    assert get(demo_service, "/_limits").json() == {"data": []}


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


def test_marks_and_after_show_only_what_came_since(demo_service):
    post(demo_service, "/v1/renders", {"prompt": "before"}, "r-1")
    marks = demo_service.marks()
    post(demo_service, "/v1/renders", {"prompt": "after"}, "r-2")
    post(demo_service, "/v1/renders", {"prompt": "after"}, "r-2")

    assert [r["prompt"] for r in demo_service.renders(after=marks["render"])] == ["after"]
    since = demo_service.meter(after=marks["meter"])
    assert [(row["key"], row["outcome"], row["count"]) for row in since] == [
        ("r-2", "billed", 1),
        ("r-2", "replayed", 1),
    ]
    assert get(demo_service, "/v1/renders", after="yesterday").status_code == 400


def test_an_editor_changes_the_content_of_a_live_article_or_takes_it_down(demo_service):
    article = post(demo_service, "/v1/articles", {**ARTICLE, "delivery_key": "p"}).json()

    edited = demo_service.edit_article(article["id"], body="B, edited")
    refused = httpx.patch(
        f"{demo_service.url}/v1/articles/{article['id']}", json={"colour": "red"}, trust_env=False
    )
    demo_service.delete_article(article["id"])

    assert edited["content_hash"] != article["content_hash"]
    assert refused.status_code == 400
    assert get(demo_service, "/v1/articles/by-key/p").status_code == 404
    assert get(demo_service, f"/v1/articles/{article['id']}").status_code == 404


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_manage_py_demo_service_starts_the_service_again_when_it_dies_and_stops_with_it(
    tmp_path,
):
    """What `make run` relies on: the service at DEMO_SERVICE_URL, started again after a
    crash with its data, and gone when its supervisor is told to stop."""
    url = f"http://127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "DEMO_SERVICE_URL": url,
        "DEMO_SERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 'service.sqlite3'}",
    }
    with open(tmp_path / "supervisor.log", "wb") as log:
        supervisor = subprocess.Popen(
            [sys.executable, "manage.py", "demo_service"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
        )
    service = ServiceClient(url)
    try:
        wait_for(service.answers, timeout=60, what="the demo service")
        post(service, "/v1/renders", {"prompt": "cover"}, KEY)
        [first] = _children(supervisor.pid)

        os.kill(first, signal.SIGKILL)  # gunicorn's master dies; its worker follows it
        wait_for(
            lambda: _children(supervisor.pid) not in ([], [first]) and service.answers(),
            timeout=60,
            what="a new demo service",
        )

        assert service.count("render", KEY) == 1
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=30) == 0
        assert not service.answers()
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        for pid in _children(supervisor.pid) if supervisor.poll() is None else []:
            os.kill(pid, signal.SIGKILL)


def test_the_whole_state_goes_out_and_comes_back_as_it_was(demo_service):
    post(demo_service, "/v1/articles", {**ARTICLE, "delivery_key": "p"}, "a")
    post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "5.00"}, "c")
    saved = demo_service.state()
    articles, meter = demo_service.articles(), demo_service.meter()

    demo_service.reset()
    post(demo_service, "/v1/renders", {"prompt": "later"}, "r")
    demo_service.put_state(saved)

    assert demo_service.articles() == articles
    assert demo_service.meter() == meter
    assert demo_service.renders() == []
    # The stored response answers the same key again, without a second charge.
    again = post(demo_service, "/v1/charges", {"account": "acct-42", "amount": "5.00"}, "c")
    assert again.is_success
    assert len(demo_service.charges()) == 1


def test_a_state_that_is_not_one_is_refused_and_changes_nothing(demo_service):
    post(demo_service, "/v1/articles", {**ARTICLE, "delivery_key": "p"}, "a")

    refused = httpx.put(f"{demo_service.url}/_state", content=b"{not json", trust_env=False)

    assert refused.status_code == 400
    assert "not a state document" in refused.json()["error"]["message"]
    assert len(demo_service.articles()) == 1


MEETING = {
    "attendees": ["ana@example.com"],
    "subject": "Review",
    "day": "2030-01-08",
    "start_time": "14:00",
    "duration_minutes": 30,
}


def test_a_meeting_is_scheduled_once_under_its_key_and_shows_in_its_days_calendar(demo_service):
    post(demo_service, "/v1/meetings", MEETING, KEY)
    post(demo_service, "/v1/meetings", MEETING, KEY)

    day = get(demo_service, "/v1/calendar", day="2030-01-08").json()
    assert [(m["subject"], m["start_time"]) for m in day["meetings"]] == [("Review", "14:00")]
    assert get(demo_service, "/v1/calendar", day="2030-01-09").json()["meetings"] == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/meetings", {**MEETING, "start_time": "25:00"}),
        ("/v1/meetings", {**MEETING, "attendees": []}),
        ("/v1/meetings", {**MEETING, "day": "next tuesday"}),
        ("/v1/mail", {"to": "ana@example.com", "subject": "Hi"}),
    ],
)
def test_a_meeting_or_mail_that_is_not_one_is_400_and_nothing_is_made(demo_service, path, body):
    assert post(demo_service, path, body, KEY).status_code == 400
    assert demo_service.meetings() == [] and demo_service.mail() == []


def test_a_calendar_asked_for_a_day_that_is_no_date_is_400(demo_service):
    assert get(demo_service, "/v1/calendar", day="soon").status_code == 400


def test_a_mail_is_sent_once_under_its_key_and_found_by_it(demo_service):
    mail = {"to": "ana@example.com", "subject": "Hi", "body": "See you."}
    post(demo_service, "/v1/mail", mail, KEY)
    post(demo_service, "/v1/mail", mail, KEY)

    [sent] = demo_service.mail()
    assert (sent["to"], sent["delivery_key"]) == ("ana@example.com", KEY)
    assert get(demo_service, f"/v1/mail/by-key/{KEY}").json()["id"] == sent["id"]
