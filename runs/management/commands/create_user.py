from __future__ import annotations

import secrets
import sys
import textwrap

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from runs.access import roles
from runs.checks import COMMAND_CHECKS
from runs.management.commands.start_run import InputsHelpFormatter


def role_help() -> str:
    lines = ["roles (each includes the one before it):"]
    for role in roles.ROLES:
        lines += textwrap.wrap(
            roles.MAY[role], width=79, initial_indent=f"  {role:<11} ", subsequent_indent=" " * 14
        )
    return "\n".join(lines)


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Make a user who signs in to the dashboard (and makes API tokens) with a role; with "
        "--update, give an existing user that role instead. Without --password-stdin a "
        "password is made and printed once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.epilog = role_help()
        parser.formatter_class = InputsHelpFormatter  # the epilog as it is written
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=roles.ROLES)
        parser.add_argument(
            "--password-stdin",
            action="store_true",
            help="read the password from the first line of standard input",
        )
        parser.add_argument(
            "--update",
            action="store_true",
            help="the user exists: give them this role (their other roles go), and the "
            "password given with --password-stdin",
        )

    def handle(self, *args, **opts) -> None:
        name, role = opts["username"], opts["role"]
        try:
            User._meta.get_field("username").clean(name, None)
        except ValidationError as exc:
            raise CommandError(f"username {name!r}: {' '.join(exc.messages)}") from None
        user = User.objects.filter(username=name).first()
        if user is not None and not opts["update"]:
            raise CommandError(f"user {name} exists; --update gives them the role {role}")
        if user is None and opts["update"]:
            raise CommandError(f"there is no user {name} to update")
        password = self._password(opts, user or User(username=name))
        with transaction.atomic():
            user = user or User(username=name)
            if password is not None:
                user.set_password(password)
            user.save()
            roles.set_role(user, role)
        made = "updated" if opts["update"] else "made"
        self.stdout.write(f"{name}: {made}, role {role} ({roles.MAY[role]})")
        if password is not None and not opts["password_stdin"]:
            self.stdout.write(f"password (shown once): {password}")

    def _password(self, opts, user: User) -> str | None:
        """The password to set: read, made (a new user), or none (an update keeps its own)."""
        if not opts["password_stdin"]:
            return None if opts["update"] else secrets.token_urlsafe(15)
        password = sys.stdin.readline().rstrip("\n")
        try:
            validate_password(password, user)
        except ValidationError as exc:
            raise CommandError(f"the password: {' '.join(exc.messages)}") from None
        return password
