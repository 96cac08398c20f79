"""Who may do what to a job: the tenants' members and admins, as the platform file lists them.

Inside one shared Ray cluster the caller's name is its own claim (CUBERAY_USER or
the login name), so these rules keep honest users apart; they are not a wall
against someone who can run code on the cluster (see docs/security.md).

- submit: members (and admins) of the tenant;
- status, logs: the submitter, members and admins of the job's tenant;
- cancel: the submitter and admins of the job's tenant.
"""

from __future__ import annotations

from cuberay.platform.control.store import JobRecord
from cuberay.platform.spec import Platform, Tenant

READ = "read"
CANCEL = "cancel"


def _tenant(platform: Platform, name: str) -> Tenant | None:
    return next((t for t in platform.tenants if t.name == name), None)


def denial(platform: Platform, rec: JobRecord, user: str, action: str) -> str | None:
    """Why ``user`` may not ``action`` (READ or CANCEL) job ``rec``; None when allowed."""
    if user == rec.user:
        return None
    tenant = _tenant(platform, rec.tenant)
    if tenant is not None and tenant.is_admin(user):
        return None
    if action == READ and tenant is not None and tenant.is_member(user):
        return None
    admins = ", ".join(tenant.admins) if tenant is not None and tenant.admins else "none listed"
    if action == CANCEL:
        return (f"user {user!r} may not cancel job {rec.id}: only its submitter ({rec.user}) and the admins of "
                f"tenant {rec.tenant!r} ({admins}) may; ask one of them")
    return (f"user {user!r} may not see job {rec.id}: it belongs to tenant {rec.tenant!r}, whose members and "
            f"admins ({admins}) may; ask an admin to add you to tenants.{rec.tenant}.members in the platform "
            f"file (set CUBERAY_USER if you are someone else)")
