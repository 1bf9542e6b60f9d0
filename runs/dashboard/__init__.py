"""The dashboard: what people see and click. Typed views, their URLs and forms, roles, the
read-only page queries, the pipeline page's figures and charts, why a run stopped, the
workers page, and django-rq's pages for supervisors.

May import anything below it (planning, the ledger, models, runs.events, runs.enqueue for the queue whose
workers it lists); nothing imports the dashboard
except runs.admin, the templatetags and resumer/urls.py.
"""
