"""The service's endpoints: thin views over idempotency.handle_create / handle_lookup and the
control endpoints tests use (/_faults, /_meter, /_reset, /_state, /_health)."""

from __future__ import annotations

from decimal import Decimal

from django.core import serializers
from django.core.serializers.base import DeserializationError
from django.db import transaction
from django.db.models import Count, Max, QuerySet, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from demo_service import chat, faults, scripts, systems
from demo_service.idempotency import Invalid, error, handle_create, handle_lookup, parse_body
from demo_service.models import (
    Article,
    Asset,
    CardLimit,
    Charge,
    Fault,
    IdempotentResponse,
    Mail,
    Meeting,
    MeterEntry,
    Operation,
    Render,
    Script,
    ScriptConversation,
)

# --- the four systems ------------------------------------------------------------------------


def _listing(request: HttpRequest, rows: QuerySet, fields: tuple[str, ...]) -> JsonResponse:
    """GET of a collection: ?<field>= filters, ?after=<n> only objects created after the one
    numbered n (what a test marked before it acted), oldest first, at most 1000."""
    for field in fields:
        if field in request.GET:
            rows = rows.filter(**{field: request.GET[field]})
    if "after" in request.GET:
        try:
            rows = rows.filter(pk__gt=int(request.GET["after"]))
        except ValueError:
            return error(400, "invalid_request", "after must be a whole number")
    return JsonResponse({"data": [row.as_json() for row in rows.order_by("pk")[:1000]]})


@require_http_methods(["GET", "POST"])
def renders(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return handle_create(request, Operation.RENDER, systems.render)
    return _listing(request, Render.objects.all(), ("delivery_key",))


@require_http_methods(["GET", "POST"])
def assets(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return handle_create(request, Operation.UPLOAD, systems.upload)
    return _listing(request, Asset.objects.all(), ("delivery_key", "name"))


@require_http_methods(["GET", "POST"])
def articles(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return handle_create(request, Operation.PUBLISH, systems.publish)
    return _listing(request, Article.objects.all(), ("account", "platform", "delivery_key"))


@require_http_methods(["GET", "PATCH", "DELETE"])
def article(request: HttpRequest, article_id: str) -> JsonResponse:
    """One article, as an editor of the platform sees it: PATCH changes its title, body or the
    delivery key it carries (what happens to a live article behind a pipeline's back), DELETE
    takes it down. Neither is metered: no pipeline does either."""
    row = systems.article_by_id(article_id)
    if row is None:
        return error(404, "not_found", f"no article {article_id}")
    if request.method == "GET":
        return JsonResponse(row.as_json())
    if request.method == "DELETE":
        row.delete()
        return JsonResponse({"id": article_id, "deleted": True})
    try:
        systems.edit_article(row, parse_body(request))
    except Invalid as exc:
        return error(400, "invalid_request", str(exc))
    return JsonResponse(row.as_json())


@require_http_methods(["GET", "POST"])
def charges(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return handle_create(request, Operation.CHARGE, systems.charge)
    return _listing(request, Charge.objects.all(), ("account", "delivery_key"))


@require_POST
def chat_completions(request: HttpRequest) -> JsonResponse:
    """OpenAI-compatible chat completions (demo_service/chat.py): metered, faults armed on op
    "chat" by the Idempotency-Key the model tool sends, never deduplicated."""
    return handle_create(request, Operation.CHAT, chat.complete)


@require_http_methods(["GET", "POST"])
def scripts_view(request: HttpRequest) -> JsonResponse:
    """POST registers a script for the scripted model (demo_service/scripts.py), replacing
    one of the same name; GET lists them."""
    if request.method == "POST":
        try:
            script = scripts.register(parse_body(request))
        except Invalid as exc:
            return error(400, "invalid_request", str(exc))
        return JsonResponse(_script_json(script), status=201)
    return JsonResponse({"data": [_script_json(s) for s in Script.objects.order_by("name")]})


@require_GET
def script(request: HttpRequest, name: str) -> JsonResponse:
    found = Script.objects.filter(name=name).first()
    if found is None:
        return error(404, "not_found", f"no script named {name!r}")
    return JsonResponse(_script_json(found))


def _script_json(script: Script) -> dict:
    return {
        "name": script.name,
        "model": f"{scripts.PREFIX}{script.name}",
        "conversations": script.conversations,
        "shared": script.shared,
        "opened": script.openings.count(),
    }


# --- the mail and calendar an assistant acts on ----------------------------------------------


@require_http_methods(["GET", "POST"])
def meetings(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return handle_create(request, Operation.MEETING, systems.schedule_meeting)
    return _listing(request, Meeting.objects.all(), ("delivery_key",))


@require_http_methods(["GET", "POST"])
def mail(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return handle_create(request, Operation.MAIL, systems.send_mail)
    return _listing(request, Mail.objects.all(), ("delivery_key", "to"))


@require_GET
def calendar(request: HttpRequest) -> JsonResponse:
    """GET /v1/calendar?day=2030-01-07: the meetings of one day, earliest first."""
    try:
        day = systems.day_of(request.GET.get("day", ""))
    except Invalid as exc:
        return error(400, "invalid_request", str(exc))
    rows = Meeting.objects.filter(day=day).order_by("start_time", "pk")
    return JsonResponse({"day": day.isoformat(), "meetings": [r.as_json() for r in rows]})


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


@require_GET
def meeting_by_key(request: HttpRequest, key: str) -> JsonResponse:
    return handle_lookup(
        request,
        Operation.FIND_MEETING,
        key,
        lambda: Meeting.objects.filter(delivery_key=key).order_by("pk").first(),
    )


@require_GET
def mail_by_key(request: HttpRequest, key: str) -> JsonResponse:
    return handle_lookup(
        request,
        Operation.FIND_MAIL,
        key,
        lambda: Mail.objects.filter(delivery_key=key).order_by("pk").first(),
    )


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


@require_http_methods(["GET", "POST", "DELETE"])
def limits(request: HttpRequest) -> JsonResponse:
    """The card processor's per-account limits: POST {"account": "acct-42", "limit": "50.00"}
    sets one (a charge above it is declined, 402); GET lists them; DELETE forgets them all
    (every account back to the default limit)."""
    if request.method == "POST":
        try:
            row = systems.set_card_limit(parse_body(request))
        except Invalid as exc:
            return error(400, "invalid_request", str(exc))
        return JsonResponse(row.as_json(), status=201)
    if request.method == "DELETE":
        CardLimit.objects.all().delete()
        return JsonResponse({"data": []})
    return JsonResponse({"data": [r.as_json() for r in CardLimit.objects.order_by("account")]})


@require_GET
def meter(request: HttpRequest) -> JsonResponse:
    """Requests answered, per operation, key and outcome: ?op= and ?key= filter, ?after=<n>
    counts only what came after meter row n (see /_marks)."""
    rows = MeterEntry.objects.all()
    if "op" in request.GET:
        rows = rows.filter(operation=request.GET["op"])
    if "key" in request.GET:
        rows = rows.filter(key=request.GET["key"])
    if "after" in request.GET:
        try:
            rows = rows.filter(pk__gt=int(request.GET["after"]))
        except ValueError:
            return error(400, "invalid_request", "after must be a whole number")
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


@require_GET
def marks(request: HttpRequest) -> JsonResponse:
    """The newest row number of each collection and of the meter: pass one back as ?after= to
    see only what came since, without resetting anything (the fault matrix runs many cases
    against one service)."""
    return JsonResponse(
        {
            name: model.objects.aggregate(top=Max("pk"))["top"] or 0
            for name, model in (
                ("render", Render),
                ("upload", Asset),
                ("publish", Article),
                ("charge", Charge),
                ("meeting", Meeting),
                ("mail", Mail),
                ("meter", MeterEntry),
            )
        }
    )


# Every table of the outside world, in an order a load can follow (no foreign keys between
# them today; the order is kept for when there are).
STATE_MODELS = (
    Render,
    Asset,
    Article,
    Charge,
    IdempotentResponse,
    MeterEntry,
    Fault,
    CardLimit,
    Meeting,
    Mail,
    Script,
    ScriptConversation,
)


@require_POST
def reset(request: HttpRequest) -> JsonResponse:
    """Forget everything: objects, stored responses, meter, faults, card limits and scripts
    (a clean outside world for the next test)."""
    with transaction.atomic():
        for model in STATE_MODELS:
            model.objects.all().delete()
    return JsonResponse({"ok": True})


@require_http_methods(["GET", "PUT"])
def state(request: HttpRequest) -> HttpResponse:
    """The whole outside world as one document (GET), or replaced by one (PUT): a test builds
    an expensive world once and puts this service back as it was for each test that starts
    from it, beside Resumer's own database."""
    if request.method == "GET":
        rows = [row for model in STATE_MODELS for row in model.objects.order_by("pk")]
        return HttpResponse(serializers.serialize("json", rows), content_type="application/json")
    try:
        objects = list(serializers.deserialize("json", request.body))
    except DeserializationError as exc:
        return error(400, "invalid_request", f"not a state document: {exc}")
    with transaction.atomic():
        for model in STATE_MODELS:
            model.objects.all().delete()
        for obj in objects:
            obj.save()
    return JsonResponse({"ok": True, "objects": len(objects)})
