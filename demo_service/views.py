"""The service's endpoints: thin views over idempotency.handle_create / handle_lookup and the
control endpoints tests use (/_faults, /_meter, /_reset, /_health)."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Sum
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from demo_service import faults, systems
from demo_service.idempotency import Invalid, error, handle_create, handle_lookup, parse_body
from demo_service.models import (
    Article,
    Asset,
    Charge,
    Fault,
    IdempotentResponse,
    MeterEntry,
    Operation,
    Render,
)

# --- the four systems ------------------------------------------------------------------------


@require_POST
def create_render(request: HttpRequest) -> JsonResponse:
    return handle_create(request, Operation.RENDER, systems.render)


@require_POST
def create_asset(request: HttpRequest) -> JsonResponse:
    return handle_create(request, Operation.UPLOAD, systems.upload)


@require_http_methods(["GET", "POST"])
def articles(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return handle_create(request, Operation.PUBLISH, systems.publish)
    rows = Article.objects.order_by("pk")
    for field in ("account", "platform", "delivery_key"):
        if field in request.GET:
            rows = rows.filter(**{field: request.GET[field]})
    return JsonResponse({"data": [a.as_json() for a in rows[:1000]]})


@require_http_methods(["GET", "POST"])
def charges(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return handle_create(request, Operation.CHARGE, systems.charge)
    rows = Charge.objects.order_by("pk")
    for field in ("account", "delivery_key"):
        if field in request.GET:
            rows = rows.filter(**{field: request.GET[field]})
    return JsonResponse({"data": [c.as_json() for c in rows[:1000]]})


# --- reconcile lookups by delivery key ---------------------------------------------------------


@require_GET
def render_by_key(request: HttpRequest, key: str) -> JsonResponse:
    return handle_lookup(
        request,
        Operation.FIND_RENDER,
        key,
        lambda: Render.objects.filter(delivery_key=key).order_by("pk").first(),
    )


@require_GET
def asset_by_key(request: HttpRequest, key: str) -> JsonResponse:
    return handle_lookup(
        request,
        Operation.FIND_ASSET,
        key,
        lambda: Asset.objects.filter(delivery_key=key).order_by("pk").first(),
    )


@require_GET
def article_by_key(request: HttpRequest, key: str) -> JsonResponse:
    """?account=&platform= narrow the search; ?content_hash= also finds an article with that
    content published by hand (without any key)."""
    return handle_lookup(
        request,
        Operation.FIND_ARTICLE,
        key,
        lambda: systems.find_article(
            key,
            request.GET.get("account", ""),
            request.GET.get("platform", ""),
            request.GET.get("content_hash", ""),
        ),
    )


@require_GET
def charge_by_key(request: HttpRequest, key: str) -> JsonResponse:
    return handle_lookup(
        request,
        Operation.FIND_CHARGE,
        key,
        lambda: Charge.objects.filter(delivery_key=key).order_by("pk").first(),
    )


# --- control endpoints for tests and the demo ----------------------------------------------------


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


@require_http_methods(["GET", "POST", "DELETE"])
def fault_list(request: HttpRequest) -> JsonResponse:
    """POST arms a fault: {"op": "publish", "mode": "drop"|"delay"|"error", "key": "...",
    "seconds": 2.5, "status": 503, "times": 1}. GET lists them; DELETE disarms all."""
    if request.method == "POST":
        try:
            fault = faults.arm(parse_body(request))
        except (Invalid, faults.InvalidFault) as exc:
            return error(400, "invalid_request", str(exc))
        return JsonResponse(fault.as_json(), status=201)
    if request.method == "DELETE":
        Fault.objects.all().delete()
        return JsonResponse({"data": []})
    return JsonResponse({"data": [f.as_json() for f in Fault.objects.order_by("pk")]})


@require_GET
def meter(request: HttpRequest) -> JsonResponse:
    """Requests answered, per operation, key and outcome: ?op= and ?key= filter."""
    rows = MeterEntry.objects.all()
    if "op" in request.GET:
        rows = rows.filter(operation=request.GET["op"])
    if "key" in request.GET:
        rows = rows.filter(key=request.GET["key"])
    grouped = (
        rows.values("operation", "key", "outcome")
        .annotate(count=Count("id"), cost=Sum("cost"))
        .order_by("operation", "key", "outcome")
    )
    return JsonResponse(
        {
            "data": [
                {
                    "op": g["operation"],
                    "key": g["key"],
                    "outcome": g["outcome"],
                    "count": g["count"],
                    "cost": str((g["cost"] or Decimal(0)).quantize(Decimal("0.0001"))),
                }
                for g in grouped
            ]
        }
    )


@require_POST
def reset(request: HttpRequest) -> JsonResponse:
    """Forget everything: objects, stored responses, meter and faults (a clean outside world
    for the next test)."""
    with transaction.atomic():
        for model in (Render, Asset, Article, Charge, IdempotentResponse, MeterEntry, Fault):
            model.objects.all().delete()
    return JsonResponse({"ok": True})
