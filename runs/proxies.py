"""The client's address behind the proxies a deployment trusts, for the login lockout.

Behind the TLS proxy docs/deploy.md prescribes, REMOTE_ADDR is the proxy's address for every
client: a lockout keyed on it locks everyone out after five bad passwords from anyone. Each
trusted proxy appends the address it received the request from to X-Forwarded-For, so with
RESUMER_TRUSTED_PROXIES = N the client is the N-th entry from the right; whatever a client
wrote into the header itself stands further left and is never read. With N = 0 (no proxy, the
default) the header is ignored. django-ipware was tried and not used: its proxy count must
match the header's length exactly, and it answers None otherwise, which would key every such
client on one address again."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    remote = request.META.get("REMOTE_ADDR", "")
    hops = settings.RESUMER_TRUSTED_PROXIES
    if hops <= 0:
        return remote
    forwarded = [
        part.strip()
        for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if part.strip()
    ]
    return forwarded[-hops] if len(forwarded) >= hops else remote
