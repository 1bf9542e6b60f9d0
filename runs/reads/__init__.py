"""Read-only queries behind the dashboard pages, one module per page: the inbox
(inbox.py), one run (run_page.py), artifacts (artifacts.py); the pipeline page's figures are
runs/dashboard/stats.py.

Every function here reads; none writes. Each page costs a fixed number of queries whatever
the number of runs or events: lists are paged on an index by keyset (never OFFSET), per-row
facts come from the row itself (the event count is `Run.last_seq`, not a COUNT over events),
and related rows are fetched in one query per kind. A lookup that finds nothing returns None:
the view says 404.
"""
