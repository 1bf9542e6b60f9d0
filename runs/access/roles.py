"""Who may do what, on every face (the dashboard, the API, the admin): three roles, kept as
Django groups.

    viewer      reads every run, plan, event and artifact
    operator    also approves a resume (strict or upgrade), answers gates, reads what failed
                stages logged (logs may hold sensitive data) and the workers page
    supervisor  also edits the effect ledger in the admin (is_staff), manages the queues and
                reads the notifications' delivery log there

Group membership is checked here, in one place, by every view, endpoint and admin class,
instead of model permissions: the roles are the product's vocabulary and need no migration.
A superuser may do everything.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, User

VIEWER = "viewer"
OPERATOR = "operator"
SUPERVISOR = "supervisor"
ROLES = (VIEWER, OPERATOR, SUPERVISOR)
# What each role may do, in the words `manage.py create_user --help` says them.
MAY = {
    VIEWER: "reads every run, plan, gate, event and artifact",
    OPERATOR: "also starts runs, approves resumes, answers gates (those for operators), "
    "reads stage logs and the workers page",
    SUPERVISOR: "also answers any gate, edits the effect ledger in the admin (staff), "
    "manages the queues",
}

AnyUser = AbstractBaseUser | AnonymousUser


def roles(user: AnyUser) -> frozenset[str]:
    """The user's role groups, read once per request (cached on the user object)."""
    if not user.is_authenticated or not user.is_active:
        return frozenset()
    cached = getattr(user, "_resumer_roles", None)
    if cached is None:
        if user.is_superuser:
            cached = frozenset(ROLES)
        else:
            cached = frozenset(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        user._resumer_roles = cached  # type: ignore[union-attr]
    return cached


def can_view(user: AnyUser) -> bool:
    return bool(roles(user))


def can_approve(user: AnyUser) -> bool:
    return bool(roles(user) & {OPERATOR, SUPERVISOR})


def can_edit_ledger(user: AnyUser) -> bool:
    # The ledger is edited in the admin, which only staff may enter.
    return SUPERVISOR in roles(user) and bool(getattr(user, "is_staff", False))


def can_manage_queues(user: AnyUser) -> bool:
    # django-rq's pages show job arguments and delete or requeue jobs; being staff (which the
    # admin's read-only tables need) is not enough.
    return SUPERVISOR in roles(user) and bool(getattr(user, "is_staff", False))


def can_read_delivery_log(user: AnyUser) -> bool:
    # Notification targets and their failures: the admin, supervisors only.
    return SUPERVISOR in roles(user) and bool(getattr(user, "is_staff", False))


def label(user: AnyUser) -> str:
    """The strongest role, for the page header."""
    held = roles(user)
    for role in (SUPERVISOR, OPERATOR, VIEWER):
        if role in held:
            return role
    return "no role"


def set_role(user: User, role: str) -> None:
    """Give `user` exactly `role`: its other role groups are taken away, and it is staff (the
    admin's way in) only as a supervisor. Other groups a deployment made are left alone."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    group, _ = Group.objects.get_or_create(name=role)
    user.is_staff = role == SUPERVISOR
    user.save(update_fields=["is_staff"])
    user.groups.remove(*Group.objects.filter(name__in=ROLES).exclude(name=role))
    user.groups.add(group)
    user.__dict__.pop("_resumer_roles", None)


def ensure_user(username: str, password: str, role: str) -> tuple[User, bool]:
    """Create (or find) a user holding exactly `role`. An existing user keeps its password:
    running the seed twice must not reset what somebody changed on purpose."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    group, _ = Group.objects.get_or_create(name=role)
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_password(password)
    user.is_staff = role == SUPERVISOR
    user.save()
    user.groups.add(group)
    return user, created
