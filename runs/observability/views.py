"""GET /metrics: Prometheus's text format (or OpenMetrics, if the scraper asks), guarded.

With RESUMER_METRICS_TOKEN set, only `Authorization: Bearer <token>` is served (compared in
constant time), from anywhere. Unset, only clients on the loopback or a private network
(10/8, 172.16/12, 192.168/16, fc00::/7) are: a Prometheus beside the web server or in the
same private network scrapes with nothing to configure, and the internet gets 403. The
client's address is the one the login lockout uses (runs/proxies.py, after
RESUMER_TRUSTED_PROXIES); a request that came through a proxy Resumer was not told about
(X-Forwarded-For present with RESUMER_TRUSTED_PROXIES=0) is refused, since its REMOTE_ADDR is
the proxy's, which would make every client of the proxy look local.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client.exposition import choose_encoder

from runs import proxies
from runs.observability import health
from runs.observability.metrics import build_registry

PRIVATE = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)

_figures = build_registry()


def local_client(request: HttpRequest) -> bool:
    """Loopback or private-network client, seen past the proxies the deployment trusts."""
    if settings.RESUMER_TRUSTED_PROXIES <= 0 and request.META.get("HTTP_X_FORWARDED_FOR"):
        return False
    try:
        address = ipaddress.ip_address(proxies.client_ip(request).strip())
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or any(address in network for network in PRIVATE)


def bearer_matches(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


@never_cache
@require_safe  # GET, and HEAD (`curl -I`), which Django answers without the body
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.RESUMER_METRICS_TOKEN
    if token and not bearer_matches(request, token):
        refused = HttpResponse("a bearer token is required\n", status=401)
        refused["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return refused
    if not token and not local_client(request):
        return HttpResponse(
            "metrics are served to local clients only; set RESUMER_METRICS_TOKEN\n",
            status=403,
            content_type="text/plain",
        )
    encoder, content_type = choose_encoder(request.META.get("HTTP_ACCEPT", ""))
    return HttpResponse(encoder(_figures), content_type=content_type)


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when this process can serve (its database and Redis answer), else 503 saying which
    did not; GET or HEAD, no sign-in (a load balancer's probe), nothing written."""
    found = health.check()
    return JsonResponse(found.to_dict(), status=200 if found.ok else 503)
