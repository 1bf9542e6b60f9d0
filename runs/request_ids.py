"""Each request's id: given by the proxy in front (X-Request-Id) or made here, answered in
X-Request-Id and written on every log line meanwhile.

Its own module, apart from the other middleware: the logging configuration loads the filter
at every start, a command line's too, and this module imports nothing beyond the standard
library and Django's request types.
"""

from __future__ import annotations

import contextvars
import logging
import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

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
