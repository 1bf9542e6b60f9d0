"""`Idempotency-Key` on the POSTs that create things (start a run, approve, approve a group,
answer a gate): the same key and the same request get the same stored response (status and
body) without acting again; the same key with another request is a 409 problem.

The key is claimed (an IdempotentRequest row, unique per user and key) before the action and
the response stored after it, so two requests racing with one key act once: the second finds
the claim and is told the first is still being answered. A response of 500 or more is not
kept, nor is the claim of an action that raised: the action did not happen as far as anyone
can tell, and the client may try the key again."""

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
        return _replay(request, key, digest)
    try:
        status, body = _outcome(act)
    except BaseException:
        IdempotentRequest.objects.filter(pk=claim.pk).delete()
        raise
    if status >= 500:
        IdempotentRequest.objects.filter(pk=claim.pk).delete()
    else:
        IdempotentRequest.objects.filter(pk=claim.pk).update(status=status, response=body)
    return response(status, body)


def _replay(request: HttpRequest, key: str, digest: str) -> JsonResponse:
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
    if row.status is None:
        raise Problem(
            409,
            "the first request with this key is still being answered; try again shortly",
            kind="idempotency-key-in-use",
        )
    answer = response(row.status, row.response)
    answer["Idempotent-Replayed"] = "true"
    return answer
