"""Security headers Django 5.2 does not set itself, and input no page has a use for."""

from __future__ import annotations

import contextvars
import logging
import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

from runs.api.problems import Problem, problem_response

API_PREFIX = "/api/"

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
            if request.path.startswith(API_PREFIX):
                return problem_response(Problem(400, self.MESSAGE, kind="invalid-request"))
            return HttpResponseBadRequest(self.MESSAGE, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def _has_nul(data) -> bool:
    return any("\x00" in key or any("\x00" in v for v in data.getlist(key)) for key in data)


# The id of the request being answered, for every log line written while it is (RequestIdFilter).
_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
# An id a proxy in front already gave the request is kept if it looks like one.
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestIdMiddleware:
    """Give each request an id (the proxy's X-Request-Id, or a new one), answer it in the
    X-Request-Id header and put it on every log line written meanwhile, so a 500 a user
    reports is found in the log with its traceback."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get("X-Request-Id", "")
        request_id = given if REQUEST_ID_RE.match(given) else uuid.uuid4().hex
        token = _request_id.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            _request_id.reset(token)
        response["X-Request-Id"] = request_id
        return response


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to every record: the request being answered, or "-"."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get()
        return True
