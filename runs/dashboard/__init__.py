"""The dashboard: what people see and click. Typed views, their URLs and forms, the pipeline
page's figures and charts, the gate pages, the start of a run, the workers page, and django-rq's pages for
supervisors. What its pages read is runs/reads/ and who may see them runs/access/, both
shared with the API.

May import: access, reads, planning, gates, ledger, models, events, pipeline, ids,
quantities, asks (an operator asking a supervisor) and execution.engine (start a run, as the
API does). Nothing imports the dashboard except runs.admin, the templatetags and
resumer/urls.py.
"""
