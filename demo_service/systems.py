"""The systems' operations: validate a request body, execute it, return the object as JSON
and what it cost. Each runs inside idempotency.handle_create's transaction."""

from __future__ import annotations

import hashlib
import re
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from demo_service.idempotency import Declined, Invalid
from demo_service.models import (
    PRICES,
    Article,
    Asset,
    CardLimit,
    Charge,
    Mail,
    Meeting,
    Operation,
    Render,
    content_hash,
)

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
CLOCK_RE = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")
MAX_CONTENT_CHARS = 5 * 1024 * 1024


def _text(body: dict[str, Any], name: str, *, limit: int, required: bool = True) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        raise Invalid(f"{name} must be a string")
    if required and not value.strip():
        raise Invalid(f"{name} is required")
    if len(value) > limit:
        raise Invalid(f"{name} must be at most {limit} characters")
    return value


def _only(body: dict[str, Any], *names: str) -> None:
    unknown = set(body) - set(names)
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(sorted(unknown))}")


def render(body: dict[str, Any], key: str) -> tuple[dict[str, Any], Decimal]:
    _only(body, "prompt")
    row = Render.make(_text(body, "prompt", limit=2000), key)
    return row.as_json(), row.cost


def upload(body: dict[str, Any], key: str) -> tuple[dict[str, Any], Decimal]:
    _only(body, "name", "content")
    name = _text(body, "name", limit=200)
    if not NAME_RE.fullmatch(name):
        raise Invalid("name may hold letters, digits, '_', '.' and '-' only")
    data = _text(body, "content", limit=MAX_CONTENT_CHARS).encode()
    row = Asset.objects.create(
        delivery_key=key, name=name, sha256=hashlib.sha256(data).hexdigest(), size=len(data)
    )
    return row.as_json(), PRICES[Operation.UPLOAD]


def publish(body: dict[str, Any], key: str) -> tuple[dict[str, Any], Decimal]:
    _only(body, "account", "platform", "title", "body", "cover_url", "delivery_key")
    title = _text(body, "title", limit=300)
    text = _text(body, "body", limit=MAX_CONTENT_CHARS)
    row = Article.objects.create(
        account=_text(body, "account", limit=64),
        platform=_text(body, "platform", limit=64),
        delivery_key=_text(body, "delivery_key", limit=255, required=False),
        title=title,
        body=text,
        content_hash=content_hash(title, text),
        cover_url=_text(body, "cover_url", limit=300, required=False),
    )
    return row.as_json(), PRICES[Operation.PUBLISH]


def _money(body: dict[str, Any], name: str) -> Decimal:
    raw = body.get(name)
    if not isinstance(raw, str):
        raise Invalid(f'{name} must be a decimal string such as "5.00"')
    try:
        amount = Decimal(raw)
    except InvalidOperation:
        raise Invalid(f"{name} {raw!r} is not a decimal") from None
    if not amount.is_finite() or not Decimal("0.01") <= amount <= Decimal("10000"):
        raise Invalid(f"{name} must be between 0.01 and 10000")
    if amount != amount.quantize(Decimal("0.01")):
        raise Invalid(f"{name} has at most two decimal places")
    return amount


def charge(body: dict[str, Any], key: str) -> tuple[dict[str, Any], Decimal]:
    _only(body, "account", "amount", "reference")
    amount = _money(body, "amount")
    account = _text(body, "account", limit=64)
    limit = CardLimit.of(account)
    if amount > limit:
        raise Declined(f"card declined: {amount} is over the limit of {limit} for {account}")
    row = Charge.objects.create(
        account=account,
        delivery_key=key,
        reference=_text(body, "reference", limit=200, required=False),
        amount=amount,
    )
    return row.as_json(), amount


def set_card_limit(body: dict[str, Any]) -> CardLimit:
    """The most the card processor charges `account` at once, from now on."""
    _only(body, "account", "limit")
    row, _ = CardLimit.objects.update_or_create(
        account=_text(body, "account", limit=64), defaults={"limit": _money(body, "limit")}
    )
    return row


def article_by_id(article_id: str) -> Article | None:
    number = article_id.removeprefix("art-")
    return Article.objects.filter(pk=int(number)).first() if number.isdecimal() else None


def edit_article(row: Article, changes: dict[str, Any]) -> None:
    """An editor's change to a live article: title, body, or the delivery key it carries."""
    _only(changes, "title", "body", "delivery_key")
    if "title" in changes:
        row.title = _text(changes, "title", limit=300)
    if "body" in changes:
        row.body = _text(changes, "body", limit=MAX_CONTENT_CHARS)
    if "delivery_key" in changes:
        row.delivery_key = _text(changes, "delivery_key", limit=255, required=False)
    row.content_hash = content_hash(row.title, row.body)
    row.save()


def find_article(key: str, account: str, platform: str, chash: str) -> Article | None:
    """By delivery key; else an article with the same content that carries no key at all
    (published by hand, outside any pipeline). The same content under another key is another
    delivery (another run's), never this one."""
    scope = Article.objects.all()
    if account:
        scope = scope.filter(account=account)
    if platform:
        scope = scope.filter(platform=platform)
    by_key = scope.filter(delivery_key=key).order_by("pk").first()
    if by_key is not None or not chash:
        return by_key
    return scope.filter(content_hash=chash, delivery_key="").order_by("pk").first()


def day_of(value: object) -> date:
    """A calendar day, as YYYY-MM-DD."""
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise Invalid(f"day {value!r} must be a date such as 2030-01-07") from None


def schedule_meeting(body: dict[str, Any], key: str) -> tuple[dict[str, Any], Decimal]:
    _only(body, "attendees", "subject", "day", "start_time", "duration_minutes")
    attendees = body.get("attendees")
    if not isinstance(attendees, list) or not attendees or len(attendees) > 50:
        raise Invalid("attendees must be a list of 1 to 50 addresses")
    if not all(isinstance(a, str) and 0 < len(a) <= 254 for a in attendees):
        raise Invalid("each attendee is an address of at most 254 characters")
    start = _text(body, "start_time", limit=5)
    if not CLOCK_RE.fullmatch(start):
        raise Invalid("start_time must be a time of day such as 14:00")
    minutes = body.get("duration_minutes")
    if not isinstance(minutes, int) or isinstance(minutes, bool) or not 5 <= minutes <= 480:
        raise Invalid("duration_minutes must be a whole number from 5 to 480")
    row = Meeting.objects.create(
        delivery_key=key,
        attendees=attendees,
        subject=_text(body, "subject", limit=300),
        day=day_of(body.get("day")),
        start_time=start,
        duration_minutes=minutes,
    )
    return row.as_json(), Decimal(0)


def send_mail(body: dict[str, Any], key: str) -> tuple[dict[str, Any], Decimal]:
    _only(body, "to", "subject", "body")
    row = Mail.objects.create(
        delivery_key=key,
        to=_text(body, "to", limit=254),
        subject=_text(body, "subject", limit=300),
        body=_text(body, "body", limit=100_000),
    )
    return row.as_json(), Decimal(0)
