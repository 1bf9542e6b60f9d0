"""Telling people that runs need them: a signed webhook and/or an email.

When an append moves a run into a status of NOTIFY_ON (or appends an event of a type in it),
a human has to act. The flow, and why it is shaped this way:

1. **Join** (`on_run_stopped`, a receiver of signals.run_stopped). After the append's
   transaction commits, the run joins the *open* notification, or opens one. At most one notification is
   open at a time, and that is a compare-and-set in the database: a partial unique index on
   `state = 'open'` makes the second of two concurrent openers fail and join the first's
   instead; joining locks the open row (SELECT ... FOR UPDATE on PostgreSQL, the IMMEDIATE
   transaction on SQLite), so it serialises with the close below. Joining touches the
   database only, never Redis.
2. **Close** (`close_due`, run by the sweeper thread of every worker, every sweep interval).
   A notification opened RESUMER_NOTIFY_WINDOW seconds ago or more is moved to `queued` by a
   compare-and-set (one sweeper wins), and one RQ job per target is queued for it. A run that
   stops after that opens the next notification. Why not a delayed RQ job per window: the
   outages this batches are often Redis outages, and a job scheduled into a Redis that is
   going away is the least reliable place to keep it; the database row and the sweepers
   that already run everywhere keep it instead. If Redis refuses the jobs, the notification
   goes back to `closed` and the next sweep queues it again.
3. **Deliver** (`deliver`, an RQ job per target taking primary keys). Every attempt writes a
   Delivery row; a failed attempt raises, and RQ retries it after each interval of
   RESUMER_NOTIFY_BACKOFF (the sweeper thread moves due retries onto the queue, see
   runs/worker.py). A job that finds its target already served does nothing, so a redelivered
   job does not send twice.

What can be lost: a process that dies between the append's commit and its join (the run is
interrupted, failed or waiting in the inbox all the same; only the message about it is not
sent), and a sweeper that dies between moving a notification to `queued` and queuing its jobs.
Both are logged where they can be.

Webhook signature: the body is JSON; the request carries `X-Resumer-Timestamp: <unix
seconds>` and `X-Resumer-Signature: sha256=<hex>`, the HMAC-SHA256 under
RESUMER_WEBHOOK_SECRET of `<timestamp>.<body bytes>`. A receiver recomputes it over the raw
body, compares in constant time, and refuses a timestamp more than five minutes from its
clock, so a captured request cannot be replayed later. `X-Resumer-Delivery` (the
notification's id) is the same on every attempt, for receivers that deduplicate.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.db.models.functions import Now
from django.urls import reverse

from runs import enqueue
from runs.models import Delivery, Event, Gate, GateRole, Notification, NotificationRun, Run

log = logging.getLogger("runs.notify")

# What a human is told about: a run moving into one of these statuses, or an event of one of
# these types. Statuses are lowercase and event types UPPERCASE, so one set holds both.
NOTIFY_ON: frozenset[str] = frozenset(
    {
        Run.Status.INTERRUPTED,
        Run.Status.FAILED,
        Run.Status.NEEDS_APPROVAL,
        # A stage asked a human (runs/gates/).
        Run.Status.WAITING,
        # Resumed work that departed from its approved plan (runs/planning/contract.py).
        Event.Type.PLAN_DEVIATED,
    }
)

SIGNATURE_HEADER = "X-Resumer-Signature"
TIMESTAMP_HEADER = "X-Resumer-Timestamp"
DELIVERY_HEADER = "X-Resumer-Delivery"
# How far a receiver should let a timestamp be from its clock (verify_signature's default).
SIGNATURE_TOLERANCE = 300
# A message lists at most this many runs; the count and the link cover the rest.
LISTED_RUNS = 50
JOB_TIMEOUT = 120


class DeliveryFailed(Exception):
    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


# --- Targets ---------------------------------------------------------------------------------


def channels() -> list[str]:
    """The configured targets' channels; empty means notifications are off."""
    found = []
    if settings.RESUMER_WEBHOOK_URL:
        found.append(Delivery.Channel.WEBHOOK.value)
    if settings.RESUMER_NOTIFY_EMAILS:
        found.append(Delivery.Channel.EMAIL.value)
    return found


def _webhook_label(url: str) -> str:
    # A webhook URL's path is often its credential (Slack's are), so the log keeps the host.
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/…"


# --- 1. Join -----------------------------------------------------------------------------------


def trigger(event_type: str, previous_status: str, status: str | None) -> str | None:
    """Why this append is news (the status moved into, or the event type), or None."""
    if status is not None and status != previous_status and status in NOTIFY_ON:
        return status
    if event_type in NOTIFY_ON:
        return event_type
    return None


def on_run_stopped(
    sender: Any,
    run_pk: int,
    status: str | None,
    seq: int = 0,
    previous_status: str = "",
    event_type: str = "",
    **kwargs: Any,
) -> None:
    """Receiver of signals.run_stopped, which the append path sends once the append's
    transaction commits (a rolled-back append tells nobody). Never raises: the stop is
    committed, and nothing here may undo or break it."""
    reason = trigger(event_type, previous_status, status)
    if reason is None or not channels():
        return
    _join_or_log(run_pk, seq, reason)


def on_gate_escalating(sender: Any, gate_pk: int, run_pk: int, **kwargs: Any) -> None:
    """Receiver of signals.gate_escalating: a gate nobody answered nears its deadline. The run
    joins a notification again, naming the role it is escalated to. Never raises."""
    if not channels():
        return
    gate = Gate.objects.filter(pk=gate_pk).values_list("seq", "escalate_to").first()
    if gate is None:
        return
    seq, role = gate
    _join_or_log(run_pk, seq, f"escalated_to_{role or GateRole.SUPERVISOR}")


def _join_or_log(run_pk: int, seq: int, reason: str) -> None:
    try:
        join(run_pk, seq, reason)
    except Exception as exc:  # the append has committed; nothing here may undo or break it
        log.error(
            "run-%s (%s at seq %s) is not in any notification, no message will tell of it: %s",
            run_pk,
            reason,
            seq,
            exc,
        )


def join(run_pk: int, seq: int, reason: str) -> int:
    """Put the run in the open notification, opening one if there is none; returns its pk."""
    for _ in range(10):
        with transaction.atomic():
            # The lock makes joining and closing take turns: a close that commits first leaves
            # nothing open here, and one that comes second sees this run in the list.
            notification = Notification.objects.select_for_update().filter(
                state=Notification.State.OPEN
            )
            found = notification.values_list("pk", flat=True).first()
            if found is not None:
                NotificationRun.objects.get_or_create(
                    notification_id=found, run_id=run_pk, defaults={"seq": seq, "reason": reason}
                )
                return found
        try:
            with transaction.atomic():
                opened = Notification.objects.create(state=Notification.State.OPEN)
                NotificationRun.objects.create(
                    notification=opened, run_id=run_pk, seq=seq, reason=reason
                )
                return opened.pk
        except IntegrityError:
            continue  # another process opened one first (notification_one_open): join that
    raise RuntimeError("could not join or open a notification after 10 tries")


# --- 2. Close ----------------------------------------------------------------------------------


def close_due(queue: Any = None) -> list[int]:
    """Queue the delivery jobs of every notification whose window is over; returns their pks.
    Called by every worker's sweeper thread; the compare-and-set lets one of them act."""
    window = timedelta(seconds=float(settings.RESUMER_NOTIFY_WINDOW))
    waiting = (Notification.State.OPEN, Notification.State.CLOSED)
    due = list(
        Notification.objects.filter(state__in=waiting, opened_at__lte=Now() - window)
        .order_by("opened_at")
        .values_list("pk", flat=True)[:100]
    )
    queued = []
    for pk in due:
        won = Notification.objects.filter(pk=pk, state__in=waiting).update(
            state=Notification.State.QUEUED, queued_at=Now()
        )
        if not won:
            continue  # another sweeper took it
        try:
            _enqueue(pk, queue)
        except Exception as exc:  # Redis away: give it back to the next sweep
            Notification.objects.filter(pk=pk, state=Notification.State.QUEUED).update(
                state=Notification.State.CLOSED, queued_at=None
            )
            log.warning("notification %s not queued, the next sweep tries again: %s", pk, exc)
            continue
        queued.append(pk)
    return queued


def _enqueue(pk: int, queue: Any = None) -> None:
    enqueue.enqueue_deliveries(
        pk,
        channels(),
        backoff=settings.RESUMER_NOTIFY_BACKOFF,
        timeout=JOB_TIMEOUT,
        on=queue,
    )


# --- 3. Deliver --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    subject: str
    # Plain text for email; `slack` is the same with Slack's <url|label> link markup.
    text: str
    slack: str
    url: str
    body: dict[str, Any]


def absolute(path: str) -> str:
    return f"{settings.RESUMER_PUBLIC_URL}{path}"


def group_url(notification_pk: int) -> str:
    return absolute(f"{reverse('runs:inbox')}?{urlencode({'notice': notification_pk})}")


def _label(reason: str) -> str:
    labels = dict(Run.Status.choices) | dict(Event.Type.choices)
    text = str(labels.get(reason, reason.replace("_", " ")))
    return text[:1].lower() + text[1:]


def compose(notification: Notification) -> Message:
    """The message about a notification's runs, read from the database."""
    members = notification.runs.select_related("run").order_by("run_id")
    count = members.count()
    rows = list(members[:LISTED_RUNS])
    reasons = dict(
        notification.runs.values_list("reason").annotate(n=Count("id")).order_by("reason")
    )
    listed = [
        {
            "run": m.run.public_id,
            "pipeline": m.run.pipeline,
            "stage": m.run.current_stage,
            "reason": m.reason,
            "status": m.run.status,
            "url": absolute(reverse("runs:run", args=[m.run_id])),
        }
        for m in rows
    ]
    asks = _asks(notification)
    if count == 1:
        only = listed[0]
        what = f"{only['run']} ({only['pipeline']}, stage {only['stage'] or '-'})"
        summary = f"{what}: {_label(only['reason'])}. It needs a human."
        url, link_label = only["url"], f"Open {only['run']}"
        subject = f"[Resumer] {only['run']} {_label(only['reason'])}"
    else:
        parts = ", ".join(f"{n} {_label(reason)}" for reason, n in reasons.items())
        summary = f"{count} runs stopped together and need a human: {parts}."
        url, link_label = group_url(notification.pk), f"Open the {count} runs"
        subject = f"[Resumer] {count} runs need a human ({parts})"
    text = f"Resumer: {summary}\n{url}"
    if count > 1:
        text += "\n\n" + "\n".join(f"{r['run']}  {_label(r['reason'])}  {r['url']}" for r in listed)
        if count > len(listed):
            text += f"\n… and {count - len(listed)} more"
    if asks:
        text += "\n\n" + "\n".join(f"{a['said']}: {a['url']}" for a in asks)
    slack = f"Resumer: {summary} <{url}|{link_label}>"
    slack += "".join(f"\n{a['said']}: <{a['url']}|open the effect>" for a in asks)
    body = {
        "text": slack,
        "notification": notification.pk,
        "count": count,
        "reasons": reasons,
        "url": url,
        "runs": listed,
        "asks": asks,
    }
    return Message(subject=subject, text=text, slack=slack, url=url, body=body)


def _asks(notification: Notification) -> list[dict[str, Any]]:
    """Who asked a supervisor about which effect (runs/asks.py), in the message's words."""
    return [
        {
            "by": ask.asked_by,
            "run": ask.effect.run.public_id,
            "effect": f"{ask.effect.stage}/{ask.effect.call_id}",
            "said": f"{ask.asked_by} asks a supervisor to settle {ask.effect.tool} "
            f"({ask.effect.stage}/{ask.effect.call_id}) of {ask.effect.run.public_id}",
            "url": absolute(reverse("runs:effect", args=[ask.effect.run_id, ask.effect_id])),
        }
        for ask in notification.asks.select_related("effect__run").order_by("id")
    ]


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The X-Resumer-Signature value: sha256=HMAC-SHA256(secret, "<timestamp>." + body)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify_signature(
    secret: str,
    timestamp: str,
    body: bytes,
    header: str,
    *,
    now: float | None = None,
    tolerance: float = SIGNATURE_TOLERANCE,
) -> bool:
    """What a receiver checks (for receivers written in Python)."""
    try:
        age = abs((time.time() if now is None else now) - int(timestamp))
    except ValueError:
        return False
    return age <= tolerance and hmac.compare_digest(signature(secret, timestamp, body), header)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A redirect would send the signed body somewhere nobody configured: it counts as a failure.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def _send_webhook(notification: Notification, message: Message, attempt: int) -> int:
    body = json.dumps(message.body, sort_keys=True).encode()
    timestamp = str(int(time.time()))
    request = urllib.request.Request(
        settings.RESUMER_WEBHOOK_URL,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "Resumer-notify",
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: signature(settings.RESUMER_WEBHOOK_SECRET, timestamp, body),
            DELIVERY_HEADER: str(notification.pk),
            "X-Resumer-Attempt": str(attempt),
        },
    )
    try:
        with _opener.open(request, timeout=settings.RESUMER_WEBHOOK_TIMEOUT) as response:
            return response.status
    except urllib.error.HTTPError as exc:  # any status outside 2xx, redirects included
        raise DeliveryFailed(f"HTTP {exc.code} {exc.reason}", exc.code) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise DeliveryFailed(str(getattr(exc, "reason", exc))) from exc


def _send_email(notification: Notification, message: Message, attempt: int) -> None:
    email = EmailMessage(
        message.subject,
        message.text,
        settings.DEFAULT_FROM_EMAIL,
        list(settings.RESUMER_NOTIFY_EMAILS),
        headers={DELIVERY_HEADER: str(notification.pk)},
    )
    try:
        email.send()
    except OSError as exc:  # smtplib.SMTPException is an OSError
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from exc


def _target(channel: str) -> str:
    if channel == Delivery.Channel.WEBHOOK:
        return _webhook_label(settings.RESUMER_WEBHOOK_URL)
    return ", ".join(settings.RESUMER_NOTIFY_EMAILS)[:255]


SENDERS: dict[str, Callable[[Notification, Message, int], int | None]] = {
    Delivery.Channel.WEBHOOK: _send_webhook,
    Delivery.Channel.EMAIL: _send_email,
}


def deliver(notification_pk: int, channel: str) -> str:
    """One attempt to send a notification to one target, logged as a Delivery. Raises
    DeliveryFailed when it failed, so that RQ retries it."""
    if channel not in SENDERS:
        raise ValueError(f"unknown channel {channel!r}")
    notification = Notification.objects.get(pk=notification_pk)
    if channel not in channels():
        return f"no {channel} target is configured any more"
    tried = notification.deliveries.filter(channel=channel)
    if tried.filter(ok=True).exists():
        return "already delivered"
    attempt = tried.count() + 1
    code: int | None = None
    error = ""
    try:
        code = SENDERS[channel](notification, compose(notification), attempt)
    except DeliveryFailed as exc:
        code, error = exc.status_code, str(exc)
    except Exception as exc:  # logged like any failed attempt, then retried like one
        error = f"{type(exc).__name__}: {exc}"
    Delivery.objects.create(
        notification=notification,
        channel=channel,
        target=_target(channel),
        attempt=attempt,
        ok=not error,
        status_code=code,
        error=error,
    )
    if error:
        raise DeliveryFailed(f"{channel} attempt {attempt}: {error}", code)
    return f"{channel} delivered on attempt {attempt}"
