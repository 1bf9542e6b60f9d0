"""What wraps an HTML page's view: log in first, then the role. The dashboard's pages and the
API's token page are guarded alike; the API's endpoints answer problems instead
(runs/api/common.py `require`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import cache_control
from django_htmx.http import HttpResponseClientRedirect

from runs.access import roles

View = Callable[..., HttpResponse]


def role_required(check: Callable[..., bool]) -> Callable[[View], View]:
    """Log in first, then the role: a logged-in user without it gets 403.

    What a role may read (runs, agent output, artifacts) is kept by no cache, shared or the
    browser's: every guarded response is `Cache-Control: private, no-store`."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                if request.htmx:
                    # A poll after the session ended: send the whole page to the login form
                    # (and back to it afterwards), not the form into the timeline.
                    page = request.htmx.current_url_abs_path or request.get_full_path()
                    return HttpResponseClientRedirect(redirect_to_login(page).url)
                return redirect_to_login(request.get_full_path())
            if not check(request.user):
                raise PermissionDenied("Your role does not allow this.")
            return view(request, *args, **kwargs)

        return cache_control(private=True, no_store=True)(wrapped)

    return decorator


viewer_required = role_required(roles.can_view)
operator_required = role_required(roles.can_approve)
supervisor_required = role_required(roles.can_edit_ledger)
