"""RFC 9457 problem details: every refusal and every bad input the API answers is an
`application/problem+json` body with `type`, `title`, `status` and `detail`, and members of
its own where they help (`plan` for a stale fingerprint, `errors` for a form)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import patch_cache_control
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

log = logging.getLogger("runs.api")

CONTENT_TYPE = "application/problem+json"
# A problem's `type`: a URI naming the kind of problem; the docs page lists them.
TYPE_BASE = "/api/v1/problems/"


class Problem(Exception):
    """Raised by an endpoint: answered as a problem+json of `status`."""

    def __init__(self, status: int, detail: str, *, kind: str = "", **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = kind or _slug(status)
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {
            "type": TYPE_BASE + self.kind,
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "detail": self.detail,
            **self.extra,
        }


def _slug(status: int) -> str:
    return HTTPStatus(status).phrase.lower().replace(" ", "-").replace("'", "")


def response(status: int, body: Any) -> JsonResponse:
    """A JSON response; a problem (status ≥ 400) says so in its content type."""
    answer = JsonResponse(body, status=status, safe=False)
    patch_cache_control(answer, private=True, no_store=True)
    if status >= 400:
        answer["Content-Type"] = CONTENT_TYPE
    return answer


def problem_response(problem: Problem) -> JsonResponse:
    return response(problem.status, problem.body())


def _loc(loc: Iterable[Any]) -> list[str]:
    """Where in the request: ninja puts the view's parameter after "body" (`body.body.mode`),
    a name from our code that the caller never wrote, so it is left out (`body.mode`)."""
    parts = [str(part) for part in loc]
    return parts[:1] + parts[2:] if parts[:1] == ["body"] else parts


def _validation(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [
        {"loc": _loc(error.get("loc", ())), "msg": str(error.get("msg", ""))}
        for error in exc.errors
    ]
    where = ", ".join(".".join(e["loc"]) for e in errors[:5])
    if errors and all(e["loc"][:1] == ["query"] for e in errors):
        # A query parameter of the wrong type (`limit=abc`) is a bad query, as a limit out of
        # range or a bad cursor is: 400, not the 422 of a body that does not fit.
        return problem_response(Problem(400, f"bad query parameter ({where})", errors=errors))
    detail = f"the request does not fit its schema ({where})" if where else "invalid request"
    return problem_response(Problem(422, detail, kind="invalid-request", errors=errors))


def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    status = exc.status_code
    if isinstance(exc, AuthenticationError):
        detail = "send `Authorization: Bearer <token>` with a valid token, or log in"
        return problem_response(Problem(status, detail, kind="unauthenticated"))
    detail = str(exc) or HTTPStatus(status).phrase
    if detail == "Cannot parse request body":
        detail = "the request body is not JSON"
    return problem_response(Problem(status, detail))


def _unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    log.exception("API %s %s failed", request.method, request.path)
    return problem_response(Problem(500, "the server failed to answer; nothing is promised"))


def install(api: NinjaAPI) -> None:
    """Answer every error the API can meet as a problem."""
    api.add_exception_handler(Problem, lambda request, exc: problem_response(exc))
    api.add_exception_handler(ValidationError, _validation)
    api.add_exception_handler(HttpError, _http_error)
    api.add_exception_handler(
        Http404, lambda request, exc: problem_response(Problem(404, str(exc) or "not found"))
    )
    api.add_exception_handler(
        PermissionDenied, lambda request, exc: problem_response(Problem(403, str(exc)))
    )
    api.add_exception_handler(
        RequestDataTooBig,
        lambda request, exc: problem_response(Problem(413, "the request body is too large")),
    )
    api.add_exception_handler(Exception, _unexpected)
