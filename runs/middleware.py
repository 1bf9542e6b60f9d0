"""Security headers Django 5.2 does not set itself, and input no page has a use for."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

# Scripts only from our own origin (htmx is served by whitenoise); no inline script, no eval.
# htmx's own inline indicator style is turned off in base.html (htmx.config.includeIndicatorStyles).
CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # The admin and django-rq pages carry their own inline scripts; they stay staff-only.
        if not request.path.startswith("/admin/"):
            response.headers.setdefault("Content-Security-Policy", CSP)
        return response


class RejectNulMiddleware:
    """A NUL character in a path, a query string or a form is a 400 with a message.
    PostgreSQL refuses NUL in any text it is given, so such a value that reached a query (the
    admin's filters and lookups take URL text as it comes) was a 500; no page or form here has
    any use for one."""

    MESSAGE = "A NUL character is not accepted in an address or a form."

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # Only a form's body is parsed here; a JSON body is the API's to read and refuse.
        form = request.method == "POST" and request.content_type in FORM_TYPES
        if "\x00" in request.path or _has_nul(request.GET) or (form and _has_nul(request.POST)):
            return HttpResponseBadRequest(self.MESSAGE, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def _has_nul(data) -> bool:
    return any("\x00" in key or any("\x00" in v for v in data.getlist(key)) for key in data)
