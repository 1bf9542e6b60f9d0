"""The page where a person makes and revokes their own API tokens (/account/tokens/). Any
role may; a token acts with its user's role. A new token's secret is shown once, on the
answer to the POST that made it, and is never stored."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_http_methods, require_POST

from runs import ids
from runs.access.guards import viewer_required
from runs.api import tokens
from runs.models import ApiToken

# A person's list; more than this many live tokens is a sign to revoke some.
MAX_SHOWN = 100


class TokenForm(forms.Form):
    name = forms.CharField(
        label="Name",
        max_length=100,
        help_text="What the token is for (e.g. “CI starts runs”), so you can tell it apart.",
    )


def _page(request: HttpRequest, form: TokenForm, secret: str = "", status: int = 200):
    mine = ApiToken.objects.filter(user=request.user).order_by("-created_at", "-id")[:MAX_SHOWN]
    context = {"form": form, "tokens": mine, "secret": secret}
    return render(request, "runs/api_tokens.html", context, status=status)


@require_http_methods(["GET", "POST"])
@viewer_required
def token_list(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _page(request, TokenForm())
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    _, secret = tokens.issue(request.user, form.cleaned_data["name"])
    return _page(request, TokenForm(), secret=secret, status=201)


@require_POST
@viewer_required
def token_revoke(request: HttpRequest, pk: str) -> HttpResponse:
    token_pk = ids.parse_pk(pk)
    revoked = tokens.revoke(request.user, token_pk) if token_pk is not None else None
    if revoked in (None, tokens.Revoked.NO_SUCH_TOKEN):
        raise Http404("You have no such token.")
    if revoked is tokens.Revoked.ALREADY:
        messages.info(request, "The token was already revoked: it is refused.")
    else:
        messages.success(request, "The token is revoked: it is refused from now on.")
    return redirect("tokens:list")


app_name = "tokens"
urlpatterns = [
    path("", token_list, name="list"),
    path("<str:pk>/revoke/", token_revoke, name="revoke"),
]
