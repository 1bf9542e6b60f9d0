"""Access: who may do what, for every face. The dashboard's views, the API's endpoints, the
admin and the templates all ask the same questions here, so a role means one thing wherever
a person or a machine comes in.

    roles.py    viewer / operator / supervisor, kept as Django groups: what each may do
    guards.py   what wraps an HTML page's view: log in first, then the role; never cached

May import: nothing of runs.
"""
