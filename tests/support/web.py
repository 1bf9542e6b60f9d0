"""Logged-in dashboard clients, one per role, for tests that go through Django's test client;
API clients by token; and what a page's form sends when nobody changes it."""

from __future__ import annotations

from html.parser import HTMLParser

from django.test import Client


def client_as(role: str, **kwargs) -> Client:
    """A client logged in as a user of `role` (viewer, operator, supervisor)."""
    from runs.access import roles

    user, _ = roles.ensure_user(role, f"{role}-test-pass", role)
    client = Client(**kwargs)
    # force_login: axes wants the request passed to authenticate(), which login() does not.
    client.force_login(user)
    return client


def api_as(role: str) -> Client:
    """A client that calls the API with a bearer token of a user of `role`."""
    from runs.access import roles
    from runs.api import tokens

    user, _ = roles.ensure_user(role, f"{role}-test-pass", role)
    _, secret = tokens.issue(user, f"{role} test token")
    return Client(headers={"Authorization": f"Bearer {secret}"})


class _FormReader(HTMLParser):
    """The fields of the form posting to one action, as a browser sends them untouched:
    inputs' values, a textarea's text (without the newline HTML drops after its start tag,
    its lines ending in CRLF, as a browser sends them) and each select's selected option."""

    def __init__(self, action: str) -> None:
        super().__init__(convert_charrefs=True)
        self.action = action
        self.inside = False
        self.values: dict[str, str] = {}
        self.textarea = ""
        self.select = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("action") == self.action
        if not self.inside:
            return
        name = a.get("name", "")
        if tag == "input" and name and a.get("type") not in ("submit", "button", "checkbox"):
            self.values[name] = a.get("value", "")
        elif tag == "textarea" and name:
            self.textarea, self.values[name] = name, ""
        elif tag == "select" and name:
            self.select = name
        elif (
            tag == "option" and self.select and ("selected" in a or self.select not in self.values)
        ):
            self.values[self.select] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "textarea" and self.textarea:
            text = self.values[self.textarea].removeprefix("\n")
            self.values[self.textarea] = text.replace("\n", "\r\n")
            self.textarea = ""
        elif tag == "select":
            self.select = ""

    def handle_data(self, data: str) -> None:
        if self.textarea:
            self.values[self.textarea] += data


def form_values(html: str, action: str) -> dict[str, str]:
    """What the page's form posting to `action` sends when nobody changes anything."""
    reader = _FormReader(action)
    reader.feed(html)
    return reader.values
