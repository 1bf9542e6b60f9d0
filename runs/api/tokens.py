"""API tokens: made by their user only (their token page; the admin revokes but makes none),
shown once, kept as the sha256 of the secret. A request's bearer token is looked up by that hash (ApiToken.secret_hash's
unique index); a revoked token, or one whose user is inactive, finds nobody."""

from __future__ import annotations

import enum
import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from runs.models import ApiToken

# Every token starts with it, so a leaked one is recognisable (and a scanner can look for it).
SCHEME = "rsm_"
PREFIX_CHARS = len(SCHEME) + 6
# A secret is far shorter than this; anything longer is not looked up.
MAX_TOKEN_CHARS = 100
# last_used_at is written at most this often per token: not a write on every request.
TOUCH_EVERY = timedelta(minutes=1)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def issue(user: AbstractBaseUser, name: str) -> tuple[ApiToken, str]:
    """A new token for `user`; the secret is returned here and never again. The caller is
    `user` themselves (the token page passes the signed-in user): a token made for somebody
    else would let its maker act, and vote, as them."""
    secret = SCHEME + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name.strip()[:100],
        prefix=secret[:PREFIX_CHARS],
        secret_hash=secret_hash(secret),
    )
    return token, secret


class Revoked(enum.Enum):
    NOW = "now"
    ALREADY = "already"  # a second click, or a page left open: nothing to do, not an error
    NO_SUCH_TOKEN = "no such token"  # none of `user`'s own


def revoke(user: AbstractBaseUser, token_pk: int) -> Revoked:
    """Revoke one of `user`'s tokens, saying whether it was revoked now or before."""
    if ApiToken.objects.filter(pk=token_pk, user=user, revoked_at__isnull=True).update(
        revoked_at=Now()
    ):
        return Revoked.NOW
    if ApiToken.objects.filter(pk=token_pk, user=user).exists():
        return Revoked.ALREADY
    return Revoked.NO_SUCH_TOKEN


def authenticate(secret: str) -> ApiToken | None:
    """The valid token with this secret (its user loaded), or None. Marks it used."""
    if not secret.startswith(SCHEME) or len(secret) > MAX_TOKEN_CHARS or not secret.isascii():
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(secret_hash=secret_hash(secret), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > TOUCH_EVERY:
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - TOUCH_EVERY)
        ).update(last_used_at=Now())
    return token
