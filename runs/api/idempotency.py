"""`Idempotency-Key` on the POSTs that create things (start a run, approve, approve a group,
answer a gate): the same key and the same request get the same stored response (status and
body) without acting again; the same key with another request is a 409 problem.

The key is claimed (an IdempotentRequest row, unique per user and key) in a commit of its
own before the action, so two requests racing with one key act once: the second finds the
claim and is told the first is still being answered. The action and its stored response
commit together, in one transaction: a web process that dies mid-request leaves the claim
with neither. Such a claim, unanswered for longer than RESUMER_IDEMPOTENCY_CLAIM_SECONDS
(longer than any request runs), is taken over by the next request with the key and body,
which acts; the response is stored only under the claim's latest attempt, so a request that
was merely slow, and was taken over, rolls its action back. A response of 500 or more is
not kept, nor is the claim of an action that raised: the action did not happen as far as
anyone can tell, and the client may try the key again. The worker's sweeper forgets keys
after RESUMER_IDEMPOTENCY_RETENTION_HOURS (IdempotentRequest.purge)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse

from runs.api.problems import Problem, response
from runs.models import IdempotentRequest

HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 200

Action = Callable[[], tuple[int, Any]]


def request_hash(request: HttpRequest, payload: Any) -> str:
    """What makes two requests "the same": method, path and the body as parsed (so the
    spacing and the order of its keys do not matter)."""
    text = json.dumps(
        [request.method, request.path, payload], sort_keys=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _key(request: HttpRequest) -> str | None:
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not key or len(key) > MAX_KEY_CHARS or not key.isascii() or not key.isprintable():
        raise Problem(400, f"{HEADER} is 1 to {MAX_KEY_CHARS} printable ASCII characters")
    return key


def _outcome(act: Action) -> tuple[int, Any]:
    try:
        return act()
    except Problem as problem:
        return problem.status, problem.body()


class _TakenOver(Exception):
    """The claim was taken over while this request acted: its action must roll back."""


def run(request: HttpRequest, payload: Any, act: Action) -> JsonResponse:
    """Answer with `act()`'s (status, body), or with the response stored under the request's
    key. `act` raises Problem for a refusal: that answer is stored too."""
    key = _key(request)
    if key is None:
        return response(*_outcome(act))
    digest = request_hash(request, payload)
    try:
        with transaction.atomic():
            claim = IdempotentRequest.objects.create(
                user=request.user, key=key, request_hash=digest
            )
    except IntegrityError:
        found = _existing(request, key, digest)
        if isinstance(found, JsonResponse):
            return found
        claim = found
    try:
        with transaction.atomic():
            status, body = _outcome(act)
            if status >= 500:
                IdempotentRequest.objects.filter(pk=claim.pk, attempt=claim.attempt).delete()
            elif not claim.settle(status, body):
                raise _TakenOver
    except _TakenOver:
        raise Problem(
            409,
            "this request ran so long that another with its key took it over; that one's "
            "answer is the key's: send the request again to read it",
            kind="idempotency-key-in-use",
        ) from None
    except BaseException:
        IdempotentRequest.objects.filter(pk=claim.pk, attempt=claim.attempt).delete()
        raise
    return response(status, body)


def _existing(request: HttpRequest, key: str, digest: str) -> JsonResponse | IdempotentRequest:
    """The stored response under a key already claimed, or its abandoned claim, taken over
    for this request; else the 409 that says why not."""
    row = IdempotentRequest.objects.filter(user=request.user, key=key).first()
    if row is None:  # the claim was given up (its action failed) between the two reads
        raise Problem(409, "the first request with this key failed; send it again", kind="retry")
    if row.request_hash != digest:
        raise Problem(
            409,
            f"this {HEADER} was used for another request (a different body or endpoint); "
            "use a new key",
            kind="idempotency-key-reused",
        )
    if row.status is None and row.take_over():
        return row
    if row.status is None:
        # Not abandoned yet, or another request took it over first; it may have answered.
        row = IdempotentRequest.objects.filter(pk=row.pk).first() or row
    if row.status is None:
        raise Problem(
            409,
            "the first request with this key is still being answered; try again shortly",
            kind="idempotency-key-in-use",
        )
    answer = response(row.status, row.response)
    answer["Idempotent-Replayed"] = "true"
    return answer
