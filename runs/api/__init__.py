"""The JSON API under /api/v1/ (django-ninja: typed schemas, OpenAPI 3, a docs page) and the
API tokens machines call it with.

Every endpoint calls the same domain function as the dashboard's page for it, and checks the
same role (runs/access/roles.py); nothing here decides a rule of its own.

    api.py          the NinjaAPI: authentication (a bearer token, or the browser's session with
                    CSRF), the routers, the docs page, the URLs
    problems.py     RFC 9457 application/problem+json: every refusal and every bad input
    idempotency.py  POSTs that create things honour `Idempotency-Key` (IdempotentRequest)
    tokens.py       making, finding and revoking tokens (ApiToken: the secret's sha256 only)
    schemas.py      what goes in and comes out, as pydantic models (the OpenAPI components)
    runs.py         runs: the inbox's list, one run, its timeline, its effects, starting one;
                    the stored plan, asking the targets again, the approval
    triage.py       groups of runs by plan shape, a group's approval, its batch
    gates.py        gates waiting for a human, one gate, its answer
    deviations.py   a finished run's deviation acknowledged
    ways_out.py     a stopped run closed out; a confirmation its target refused asked again;
                    a supervisor asked to settle a blocked effect
    token_views.py  the dashboard's page where a person makes and revokes their own tokens

May import: access, reads, planning, gates, ledger, models, events, pipeline, ids,
quantities, asks (an operator asking a supervisor, as the dashboard does) and
execution.engine (start_run); never the dashboard.
"""
