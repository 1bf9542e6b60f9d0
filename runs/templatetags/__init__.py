"""The dashboard's template tags and filters: what a page's template asks of a value (money,
an action's words, a user's role, a run's conversation, markdown made safe).

May import: access, reads, dashboard, planning, events and quantities.
"""
