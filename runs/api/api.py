"""The NinjaAPI under /api/v1/: who is asking, the routers, the docs page.

A request is authenticated by `Authorization: Bearer <token>` (runs/api/tokens.py) or by the
browser's session; a session's POST needs Django's CSRF token (the `X-CSRFToken` header), as
the pages' forms do. A bearer token that is not valid (unknown, revoked, its user inactive) is
refused with 401 and never falls back to a session. Either way the request then acts as that
user, with their role (runs/access/roles.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control
from django.views.decorators.cache import cache_control
from ninja import NinjaAPI
from ninja.errors import AuthenticationError
from ninja.openapi.docs import Swagger
from ninja.security import HttpBearer, SessionAuth

from runs.access import roles
from runs.api import deviations, gates, pipelines, problems, tokens, triage, ways_out
from runs.api import runs as run_endpoints
from runs.api.problems import Problem, problem_response
from runs.api.schemas import UserOut


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        found = tokens.authenticate(token)
        if found is None:
            raise AuthenticationError()
        request.user = found.user
        request.api_token = found  # type: ignore[attr-defined]
        return found.user


class BrowserSession(SessionAuth):
    """The logged-in browser, CSRF checked on unsafe methods; no session, no CSRF check (the
    answer is then 401, not a CSRF failure)."""

    def __call__(self, request: HttpRequest) -> Any:
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)


def docs_login(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The schema and its docs page: for anyone with a role, by token or by session."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        header = request.headers.get("Authorization", "")
        if header[:7].lower() == "bearer ":
            token = tokens.authenticate(header[7:].strip())
            if token is None:
                return problems.problem_response(Problem(401, "this token is not valid"))
            request.user = token.user
        elif not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not roles.can_view(request.user):
            return problems.problem_response(Problem(403, "your role does not allow this"))
        return view(request, *args, **kwargs)

    return cache_control(private=True, no_store=True)(wrapped)


class LocalSwagger(Swagger):
    """Swagger UI from ninja's own static files, never from a CDN. ninja renders that page
    only when it is an installed app, which it is not here (settings.py says why): the same
    template is rendered in its place."""

    template_cdn = str(settings.NINJA_DIR / "templates" / Swagger.template)


class ResumerAPI(NinjaAPI):
    def create_response(self, request: HttpRequest, data: Any, **kwargs: Any) -> HttpResponse:
        # What a role may read is kept by no cache, shared or the browser's (as the pages).
        answer = super().create_response(request, data, **kwargs)
        patch_cache_control(answer, private=True, no_store=True)
        return answer


api = ResumerAPI(
    title="Resumer API",
    version="1",
    description="Runs, their plans, approvals, groups and gates, for machines. "
    "See docs/api.md. Errors are application/problem+json (RFC 9457).",
    auth=[TokenAuth(), BrowserSession(csrf=True)],
    urls_namespace="api",
    docs=LocalSwagger(),
    docs_decorator=docs_login,
)
problems.install(api)


@api.get("/me", response=UserOut, summary="Who this request acts as", tags=["account"])
def me(request: HttpRequest) -> dict[str, Any]:
    held = roles.roles(request.user)
    return {
        "username": request.user.get_username(),
        "role": roles.label(request.user),
        "roles": sorted(held),
        "via": "token" if getattr(request, "api_token", None) else "session",
    }


api.add_router("/runs", run_endpoints.router)
api.add_router("/", triage.router)
api.add_router("/gates", gates.router)
api.add_router("/runs", deviations.router)
api.add_router("/runs", ways_out.router)
api.add_router("/pipelines", pipelines.router)

urls = api.urls


def api_not_found(request: HttpRequest) -> HttpResponse:
    """An address under /api/ that no operation answers: a 404 problem, like every API error."""
    return problem_response(Problem(404, f"no API operation at {request.path}"))
