"""Reads: what the pages show, read for every face. The dashboard's pages and the API's
endpoints read runs, gates and plans through the same functions here, one module per page:

    inbox.py        the runs that need a human, their stop reasons and groups, filtered
    filters.py      the inbox's filters as a query string sends them (one form, both faces)
    stops.py        why a run stopped, in one sentence, and the reason kinds the inbox filters by
    run_page.py     one run: its timeline, progress, verdict, stage logs and artifacts
    verdicts.py     the verdict on the plan a run was resumed with, said for people
    live.py         what a live run page's poll gets: only what moved since the page was drawn
    decision.py     what the run page offers a human: strict, upgrade, blockers, refusals
    effect_page.py  one effect, with what the plan says of it
    gates.py        gates waiting for a human: one gate's page, identical gates together
    artifacts.py    a stage's artifacts, verified against their manifest
    conversation.py a model call's messages, for the run page
    groups.py       the calls a group of runs would make
    batches.py      a group approval's outcome
    workers.py      the live RQ workers and the leases each holds (Redis and the database)
    pipeline_stats.py  the pipeline page's figures per stage over its last N runs, with what
                    resuming saved (resume_savings.py) apart from what gates replayed

Every function here reads; none writes. Each page costs a fixed number of queries whatever
the number of runs or events: lists are paged on an index by keyset (never OFFSET), per-row
facts come from the row itself (the event count is `Run.last_seq`, not a COUNT over events),
and related rows are fetched in one query per kind. A lookup that finds nothing returns None:
the view says 404, the API a 404 problem. The pipeline page's figures are read for both faces
too (its charts are the dashboard's).

May import: planning, gates, ledger, models, events, pipeline, ids, quantities and enqueue
(the queue whose workers the workers page lists).
"""
