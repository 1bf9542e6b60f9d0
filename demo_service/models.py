"""The service's own state: the four systems' objects, stored idempotent responses, the meter
and the armed faults. The demo pipeline prices its tools with these prices."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any
from xml.sax.saxutils import escape

from django.db import models
from django.db.models.functions import Now


class Operation(models.TextChoices):
    """What a request asks of the service; faults and the meter are per operation."""

    RENDER = "render"
    UPLOAD = "upload"
    PUBLISH = "publish"
    CHARGE = "charge"
    # The demo's language model (demo_service/chat.py): never deduplicated, like any model API.
    CHAT = "chat"
    # The mail and calendar an assistant acts on (examples/email_assistant.py).
    MEETING = "meeting"
    MAIL = "mail"
    FIND_RENDER = "render.lookup"
    FIND_ASSET = "upload.lookup"
    FIND_ARTICLE = "publish.lookup"
    FIND_CHARGE = "charge.lookup"
    FIND_MEETING = "meeting.lookup"
    FIND_MAIL = "mail.lookup"


PRICES = {
    Operation.RENDER: Decimal("0.0400"),
    Operation.UPLOAD: Decimal("0.0010"),
    Operation.PUBLISH: Decimal("0.0000"),
}

# Operations that honour Idempotency-Key the way payment APIs do. The publishing platform,
# like most real CMSs, does not: two publishes make two articles, and only a lookup by the
# delivery key it stores with the article tells whether a publish happened. That is what
# makes publish a RECONCILE_FIRST tool.
KEYED_OPERATIONS = frozenset(
    {Operation.RENDER, Operation.UPLOAD, Operation.CHARGE, Operation.MEETING, Operation.MAIL}
)


class IdempotentResponse(models.Model):
    """The stored answer to the first request with an Idempotency-Key: a retry with the same
    key and the same request gets it back; with a different request, a 409."""

    key = models.CharField(max_length=255, unique=True)
    operation = models.CharField(max_length=32, choices=Operation.choices)
    # sha256 of method, path and the canonical JSON body.
    fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    body = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())


class Render(models.Model):
    """The image renderer: each row is one billed render."""

    delivery_key = models.CharField(max_length=255, blank=True)
    prompt = models.TextField()
    svg = models.TextField()
    sha256 = models.CharField(max_length=64)
    cost = models.DecimalField(max_digits=10, decimal_places=4)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Reconcile: GET /v1/renders/by-key/<key>.
            models.Index(fields=["delivery_key"], name="svc_render_key_idx"),
        ]

    @classmethod
    def make(cls, prompt: str, key: str) -> Render:
        svg = (
            '<svg xmlns="http://www.w3.org/2000/svg" width="320" height="180" viewBox="0 0 320 180">'
            f'<rect width="320" height="180" fill="#{hashlib.sha256(prompt.encode()).hexdigest()[:6]}"/>'
            f'<text x="16" y="96" font-size="14" fill="#fff">{escape(prompt[:60])}</text></svg>'
        )
        return cls.objects.create(
            delivery_key=key,
            prompt=prompt,
            svg=svg,
            sha256=hashlib.sha256(svg.encode()).hexdigest(),
            cost=PRICES[Operation.RENDER],
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "id": f"rnd-{self.pk}",
            "object": "render",
            "delivery_key": self.delivery_key,
            "prompt": self.prompt,
            "svg": self.svg,
            "sha256": self.sha256,
            "cost": str(self.cost),
        }


class Asset(models.Model):
    """The asset store: one row per stored upload."""

    delivery_key = models.CharField(max_length=255, blank=True)
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64)
    size = models.PositiveIntegerField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Reconcile: GET /v1/assets/by-key/<key>.
            models.Index(fields=["delivery_key"], name="svc_asset_key_idx"),
        ]

    @property
    def url(self) -> str:
        return f"https://assets.example/{self.sha256[:16]}/{self.name}.svg"

    def as_json(self) -> dict[str, Any]:
        return {
            "id": f"ast-{self.pk}",
            "object": "asset",
            "delivery_key": self.delivery_key,
            "name": self.name,
            "sha256": self.sha256,
            "size": self.size,
            "url": self.url,
        }


def content_hash(title: str, body: str) -> str:
    return hashlib.sha256(f"{title}\n{body}".encode()).hexdigest()


class Article(models.Model):
    """The publishing platform. It does NOT deduplicate: two publishes, two articles."""

    account = models.CharField(max_length=64)
    platform = models.CharField(max_length=64)
    # Metadata the publisher sends in the body; the platform only stores and searches it.
    delivery_key = models.CharField(max_length=255, blank=True)
    title = models.CharField(max_length=300)
    body = models.TextField()
    content_hash = models.CharField(max_length=64)
    cover_url = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Reconcile: "is there an article with this delivery key / content hash?"
            models.Index(
                fields=["account", "platform", "delivery_key"], name="svc_article_key_idx"
            ),
            models.Index(
                fields=["account", "platform", "content_hash"], name="svc_article_hash_idx"
            ),
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": f"art-{self.pk}",
            "object": "article",
            "account": self.account,
            "platform": self.platform,
            "delivery_key": self.delivery_key,
            "title": self.title,
            "content_hash": self.content_hash,
            "cover_url": self.cover_url,
            "url": f"https://{self.platform}.example/a/{self.pk}",
        }


class Charge(models.Model):
    """The card processor: every executed request charges the card."""

    account = models.CharField(max_length=64)
    delivery_key = models.CharField(max_length=255, blank=True)
    reference = models.CharField(max_length=200, blank=True)
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Reconcile: GET /v1/charges/by-key/<key>.
            models.Index(fields=["delivery_key"], name="svc_charge_key_idx"),
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": f"ch-{self.pk}",
            "object": "charge",
            "account": self.account,
            "delivery_key": self.delivery_key,
            "reference": self.reference,
            "amount": str(self.amount),
            "currency": "usd",
        }


# What the card processor lets an account charge at once when nobody set a limit for it: the
# demo's promotion fee ($5.00) is well inside it; an edited amount above it is declined. It is
# below the demo's ceiling for an edit ($100.00, demo/pipeline.py), so an amount the reviewer
# may set can still be refused by the target: what Ask again is for.
DEFAULT_CARD_LIMIT = Decimal("50.00")


class CardLimit(models.Model):
    """The most the card processor charges an account at once (set through /_limits); an
    account without a row has DEFAULT_CARD_LIMIT. A larger amount is declined (402), with
    nothing charged: a valid request the target refuses."""

    account = models.CharField(max_length=64, unique=True)
    limit = models.DecimalField(max_digits=10, decimal_places=2)

    @classmethod
    def of(cls, account: str) -> Decimal:
        row = cls.objects.filter(account=account).first()
        return row.limit if row is not None else DEFAULT_CARD_LIMIT

    def as_json(self) -> dict[str, Any]:
        return {"account": self.account, "limit": str(self.limit)}


class Meeting(models.Model):
    """The calendar: one row per meeting scheduled (an Idempotency-Key schedules it once)."""

    delivery_key = models.CharField(max_length=255, blank=True)
    attendees = models.JSONField(default=list)
    subject = models.CharField(max_length=300)
    day = models.DateField()
    start_time = models.CharField(max_length=5)
    duration_minutes = models.PositiveIntegerField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # GET /v1/calendar?day=: the day's meetings; reconcile by key.
            models.Index(fields=["day"], name="svc_meeting_day_idx"),
            models.Index(fields=["delivery_key"], name="svc_meeting_key_idx"),
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": f"mtg-{self.pk}",
            "object": "meeting",
            "delivery_key": self.delivery_key,
            "attendees": self.attendees,
            "subject": self.subject,
            "day": self.day.isoformat(),
            "start_time": self.start_time,
            "duration_minutes": self.duration_minutes,
        }


class Mail(models.Model):
    """The outbox: one row per email sent (an Idempotency-Key sends it once)."""

    delivery_key = models.CharField(max_length=255, blank=True)
    to = models.CharField(max_length=254)
    subject = models.CharField(max_length=300)
    body = models.TextField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [models.Index(fields=["delivery_key"], name="svc_mail_key_idx")]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": f"mail-{self.pk}",
            "object": "mail",
            "delivery_key": self.delivery_key,
            "to": self.to,
            "subject": self.subject,
            "body": self.body,
        }


class Script(models.Model):
    """A script the scripted model follows (demo_service/scripts.py): its conversations,
    each a list of steps; `shared`: one list every conversation follows."""

    name = models.CharField(max_length=100, unique=True)
    conversations = models.JSONField()
    shared = models.BooleanField(default=False)
    created_at = models.DateTimeField(db_default=Now())


class ScriptConversation(models.Model):
    """Which of a script's conversations a conversation follows, known by its opening (the
    sha256 of the messages before the model's first answer)."""

    script = models.ForeignKey(Script, on_delete=models.CASCADE, related_name="openings")
    opening = models.CharField(max_length=64)
    number = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["script", "opening"], name="svc_script_opening"),
            models.UniqueConstraint(fields=["script", "number"], name="svc_script_number"),
        ]


class MeterEntry(models.Model):
    """One row per request the service answered (or dropped), so tests can count billed work."""

    class Outcome(models.TextChoices):
        BILLED = "billed"  # executed: a render made, an article published, a card charged
        REPLAYED = "replayed"  # same key, same request: the stored answer, nothing executed
        CONFLICT = "conflict"  # same key, different request: 409
        INVALID = "invalid"  # 400: nothing executed
        DECLINED = "declined"  # 402: a valid charge over the account's limit, nothing charged
        REFUSED = "refused"  # an armed 5xx fault: answered before anything was committed
        FOUND = "found"  # a lookup that found the object
        MISSING = "missing"  # a lookup that found nothing

    operation = models.CharField(max_length=32, choices=Operation.choices)
    key = models.CharField(max_length=255, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    cost = models.DecimalField(max_digits=10, decimal_places=4, default=Decimal(0))
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # GET /_meter?op=&key=: counts per operation, key and outcome.
            models.Index(fields=["operation", "key"], name="svc_meter_op_key_idx"),
        ]


class Fault(models.Model):
    """A fault armed for the next `remaining` requests of one operation (and one key)."""

    class Mode(models.TextChoices):
        DROP = "drop"  # commit, then drop the connection without answering
        DELAY = "delay"  # commit, then answer after `seconds`
        ERROR = "error"  # answer `status` (5xx) before anything is committed

    operation = models.CharField(max_length=32, choices=Operation.choices)
    # Empty: any request of the operation. Otherwise the Idempotency-Key, or for the platform
    # the delivery_key in the body, or for a lookup the key in its path.
    key = models.CharField(max_length=255, blank=True)
    mode = models.CharField(max_length=8, choices=Mode.choices)
    seconds = models.FloatField(default=0)
    status = models.PositiveSmallIntegerField(default=503)
    remaining = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # faults.take(): the oldest armed fault for an operation and key.
            models.Index(fields=["operation", "remaining"], name="svc_fault_op_idx"),
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "op": self.operation,
            "key": self.key,
            "mode": self.mode,
            "seconds": self.seconds,
            "status": self.status,
            "remaining": self.remaining,
        }
