"""Security headers Django 5.2 does not set itself, input no page has a use for, and a page
for a form's address opened in the address bar."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from urllib.parse import parse_qsl

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render

from runs.api.problems import CONTENT_TYPE, Problem, problem_response

API_PREFIX = "/api/"
# Deeper than any answer, input or plan body here (a typed input's schema included).
MAX_JSON_DEPTH = 64

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


class MethodNotAllowedPageMiddleware:
    """A page address that only takes a POST (an approval, an answer), opened in the address
    bar after a refusal drew its page there, was an empty 405 the browser shows as "HTTP ERROR
    405": it says what the address is and the way back instead. Under /api/ the 405 (ninja's
    own, a text/html "Method not allowed") is a problem, as every API error is, its Allow
    header kept."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code != 405:
            return response
        allow = response.headers.get("Allow", "")
        if request.path.startswith(API_PREFIX):
            if response.headers.get("Content-Type") == CONTENT_TYPE:
                return response
            detail = f"{request.method} is not an operation of this address; it takes {allow}"
            answer = problem_response(Problem(405, detail, allow=sorted(allow.split(", "))))
        elif response.content:
            return response
        else:
            answer = render(request, "405.html", {"request_path": request.path}, status=405)
        answer.headers["Allow"] = allow
        return answer


class RejectNulMiddleware:
    """Text no database stores is a 400 with a message, wherever it comes in: a NUL in a path,
    a query string, a form or a JSON body, and a lone surrogate in a JSON body (the one way
    to write one: `"\\ud800"`; a form or a path decodes broken UTF-8 to U+FFFD). PostgreSQL
    refuses both in any text it is given, so such a value that reached a query or a row was
    a 500; no page, form or API operation here has any use for one. Under /api/ the answer
    is a problem, as every API error is."""

    MESSAGE = "A NUL character is not accepted in an address or a form."
    # Django reads such a form with U+FFFD in place of the bytes: a gate's answer recorded
    # "o\ufffd\ufffd\ufffdk" for what was sent.
    UTF8_MESSAGE = "The form holds bytes that are not UTF-8 text; nothing was recorded."
    JSON_MESSAGE = (
        "The JSON body holds text no database can store: a NUL character (\\u0000) or a lone "
        "surrogate (\\ud800-\\udfff)."
    )
    DEPTH_MESSAGE = (
        f"The JSON body is nested deeper than {MAX_JSON_DEPTH} levels; nothing here takes one."
    )

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        form = request.method == "POST" and request.content_type in FORM_TYPES
        if form and request.content_type == URLENCODED and not _utf8_form(_body(request)):
            return self.refuse(request, self.UTF8_MESSAGE)
        if "\x00" in request.path or _has_nul(request.GET) or (form and _has_nul(request.POST)):
            return self.refuse(request, self.MESSAGE)
        refused = _json_refusal(_body(request)) if _is_json(request.content_type) else ""
        if refused:
            return self.refuse(request, refused)
        return self.get_response(request)

    @staticmethod
    def refuse(request: HttpRequest, message: str) -> HttpResponse:
        if request.path.startswith(API_PREFIX):
            return problem_response(Problem(400, message, kind="invalid-request"))
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


URLENCODED = "application/x-www-form-urlencoded"
FORM_TYPES = frozenset({URLENCODED, "multipart/form-data"})
# A NUL, or a UTF-16 surrogate standing alone (a decoded JSON string can hold one; UTF-8 can
# encode neither for a database).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _has_nul(data) -> bool:
    return any("\x00" in key or any("\x00" in v for v in data.getlist(key)) for key in data)


def _utf8_form(body: bytes) -> bool:
    """Whether a urlencoded body's names and values are UTF-8 text once decoded (a browser
    sends nothing else)."""
    try:
        parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        return False
    return True


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def _body(request: HttpRequest) -> bytes:
    """The body, or none when it is over the upload limit: the operation reading it then
    answers that (the API's 413 problem), as it would without this middleware."""
    try:
        return request.body
    except RequestDataTooBig:
        return b""


def _json_refusal(body: bytes) -> str:
    """Why the JSON body is refused here, "" when it is not: a key or a string holding
    unstorable text, or nesting deeper than MAX_JSON_DEPTH (Python's parser, and pydantic's
    serializer that records an answer, raise on a body nested a few hundred deep: a 500). A
    body that is not JSON is left to the operation, which says what is wrong with it."""
    try:
        value = json.loads(body)
    except RecursionError:
        return RejectNulMiddleware.DEPTH_MESSAGE
    except ValueError:
        return ""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if UNSTORABLE.search(item):
                return RejectNulMiddleware.JSON_MESSAGE
        elif isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                return RejectNulMiddleware.DEPTH_MESSAGE
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return ""
