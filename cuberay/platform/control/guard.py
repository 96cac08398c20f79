"""The controller's access boundary: who the caller is, and whether the rule its method declares lets it in.

Every public controller method declares a rule (``cuberay/platform/api/endpoints.py``); the wrapper in
:mod:`.endpoint` calls :meth:`Guard.admit` before the method runs and hands the method the
:class:`Principal` it returns. A refusal is an AdmissionError (exit 3) written to the event log as a
``denied`` event.

Credentials: a job's driver holds its attempt's secret (random, in the environment of the attempt's
processes; an external driver makes its own and hands it over with its submit); the store keeps only its
SHA-256, so a restarted controller (or a new head on the same store) still knows the drivers of the
attempts it adopts. The platform's own components in this process
hold the platform credential, made afresh by each controller process and never sent anywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, Callable

from cuberay.errors import AdmissionError, NotFoundError
from cuberay.platform.api import Caller, Endpoint, Over, Who
from cuberay.platform.api.records import JobRecord
from cuberay.platform.control.store import Store, pick_named
from cuberay.platform.spec import Platform

_PLATFORM_PREFIX = "platform:"


def new_driver_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who a call was admitted as: ``user`` it acts for; a driver of ``job_id``; or the platform itself."""

    user: str
    kind: str = "user"              # "user", "driver" or "platform"
    job_id: str | None = None       # the job whose driver this is
    job_tenant: str | None = None   # that job's tenant
    admin: bool = False             # a platform admin (or the platform)
    target: Any = None              # what the rule was about: a JobRecord, a RunRecord or a tenant name
    preferred_tenant: str | None = None  # the caller's own default tenant (CUBERAY_TENANT), for tenant resolution

    @property
    def is_platform(self) -> bool:
        return self.kind == "platform"


class Guard:
    """Identifies callers and applies the declared rules. ``platform`` is a getter: a reload replaces it."""

    def __init__(self, platform: Callable[[], Platform], store: Store, installer: str | None = None,
                 runs: Callable[[str, Principal], Any] | None = None) -> None:
        self._platform = platform
        self.store = store
        self.installer = installer
        self.runs = runs  # (run id or pipeline name, principal) -> RunRecord, set once the pipelines exist
        self._credential = _PLATFORM_PREFIX + secrets.token_urlsafe(32)

    # -------------------------------------------------------------- credentials

    def platform_caller(self, user: str) -> Caller:
        """The caller of a platform component acting for ``user`` (a pipeline run's creator, say)."""
        return Caller(user=user, token=self._credential)

    def identify(self, caller: Any) -> Principal:
        try:
            caller = _as_caller(caller)
        except AdmissionError as err:
            self.deny(str(err))
        platform = self._platform()
        admin = platform.is_admin(caller.user) or caller.user == self.installer
        token = caller.token
        if token is None:
            return Principal(caller.user, admin=admin, preferred_tenant=caller.tenant)
        if token.startswith(_PLATFORM_PREFIX):
            if hmac.compare_digest(token, self._credential):
                return Principal(caller.user, "platform", admin=True)
            self.deny(f"a call by {caller.user!r} carried a platform credential that is not this controller's "
                       f"(each controller makes its own); platform components get it from the controller")
        rec = self.store.job_of_token(token_hash(token))  # an indexed lookup of the hash: it names the job
        if rec is None:
            self.deny(f"a call by {caller.user!r} carried a driver credential that is no current attempt's (a "
                       f"stale attempt, or a forged one); drivers get theirs when their attempt starts")
        # The record just read goes along: a driver's rule is about its own job, which need not be read again.
        return Principal(caller.user, "driver", job_id=rec.id, job_tenant=rec.tenant, admin=admin, target=rec)

    # -------------------------------------------------------------- rules

    def admit(self, endpoint: Endpoint, caller: Any, target: Any) -> Principal:
        """The principal of a call of ``endpoint`` about ``target`` (the rule's parameter); AdmissionError if not."""
        who = self.identify(caller)
        rule = endpoint.rule
        if rule.over == Over.NOTHING or (rule.optional and target is None):
            if rule.who == Who.ADMIN and not who.admin:
                self.deny(f"user {who.user!r} may not call {endpoint.name}: only platform admins may "
                           f"({self._admins()}); ask one of them")
            if rule.who == Who.PLATFORM and not who.is_platform:
                self.deny(f"{endpoint.name} is the platform's own call; no user may make it")
            return who
        if rule.over == Over.TENANT:
            return self._tenant_rule(endpoint, who, target)
        if rule.over == Over.JOB:
            return self._job_rule(endpoint, who, target)
        return self._run_rule(endpoint, who, target)

    def _tenant_rule(self, endpoint: Endpoint, who: Principal, tenant: str | None) -> Principal:
        # None: the caller's own tenant, which the method resolves (and refuses if there is none).
        if tenant is None or who.admin or who.job_tenant == tenant or self._member(who.user, tenant):
            return _with(who, tenant)
        self.platform_tenant(tenant)  # an unknown tenant is a NotFound-like SpecError, not a denial
        self.deny(f"user {who.user!r} may not call {endpoint.name} for tenant {tenant!r}: only its members and "
                   f"admins ({self._members(tenant)}) may; ask an admin to add you to tenants.{tenant}.members in "
                   f"the platform file (set CUBERAY_USER if you are someone else)")
        raise AssertionError  # _deny raised

    def _job_rule(self, endpoint: Endpoint, who: Principal, ref: str) -> Principal:
        if endpoint.rule.who == Who.DRIVER:
            if who.kind == "driver" and who.job_id == ref:
                return who  # identify() read this job by its attempt's secret a moment ago
            if who.is_platform:
                return _with(who, self.store.get_job(ref))
            self.deny(f"{endpoint.name} is for the driver of job {ref}; this call carries no credential of its "
                       f"current attempt (user {who.user!r})", ref if self.store.has_job(ref) else None)
        rec = self.find_job(who, ref, endpoint.name)
        if self.may(who, rec, endpoint.rule.who):
            return _with(who, rec)
        tenant = self._tenant(rec.tenant)
        admins = ", ".join(tenant.admins) if tenant is not None and tenant.admins else "none listed"
        if endpoint.rule.who == Who.OWNER:
            self.deny(f"user {who.user!r} may not {_verb(endpoint.name)} job {rec.id}: only its submitter "
                       f"({rec.user}) and the admins of tenant {rec.tenant!r} ({admins}) may; ask one of them",
                       rec.id)
        self.deny(f"user {who.user!r} may not see job {rec.id}: it belongs to tenant {rec.tenant!r}, whose members "
                   f"and admins ({admins}) may; ask an admin to add you to tenants.{rec.tenant}.members in the "
                   f"platform file (set CUBERAY_USER if you are someone else)", rec.id)
        raise AssertionError

    def _run_rule(self, endpoint: Endpoint, who: Principal, ref: str) -> Principal:
        assert self.runs is not None, "pipeline rules need the pipeline component"
        run = self.runs(ref, who)
        member = self._member(who.user, run.tenant)
        owns = run.user == who.user or self._admin_of(who.user, run.tenant)
        if who.admin or (member and (endpoint.rule.who == Who.MEMBER or owns)):
            return _with(who, run)
        if endpoint.rule.who == Who.OWNER and self._member(who.user, run.tenant):
            self.deny(f"user {who.user!r} may not {_verb(endpoint.name)} pipeline run {run.id}: only who started "
                       f"it ({run.user}) and the admins of tenant {run.tenant!r} may; ask one of them")
        self.deny(f"user {who.user!r} may not see pipeline run {run.id}: it belongs to tenant {run.tenant!r}, "
                   f"whose members and admins ({self._members(run.tenant)}) may")
        raise AssertionError

    # -------------------------------------------------------------- reading

    def may(self, who: Principal, rec: JobRecord, level: Who = Who.MEMBER) -> bool:
        """Whether ``who`` may read (MEMBER) or change (OWNER) job ``rec``."""
        if who.admin or who.job_id == rec.id or who.user == rec.user:
            return True
        if level == Who.OWNER:
            return self._admin_of(who.user, rec.tenant)
        return self._member(who.user, rec.tenant)

    def visible_tenants(self, who: Principal) -> set[str] | None:
        """The tenants whose jobs ``who`` may read; None for all of them. (Its own jobs are readable too.)"""
        if who.admin:
            return None
        names = {t.name for t in self._platform().tenants if t.is_member(who.user)}
        return names | ({who.job_tenant} if who.job_tenant else set())

    def find_job(self, who: Principal, ref: str, method: str = "status") -> JobRecord:
        """The job ``ref`` names: its id, else the one job of that name among those ``who`` may read."""
        try:
            return self.store.get_job(ref)
        except NotFoundError:
            pass
        named = self.store.jobs_named(ref)
        mine = [r for r in named if self.may(who, r)]
        if named and not mine:
            tenants = ", ".join(sorted({r.tenant for r in named}))
            self.deny(f"user {who.user!r} may not see the jobs named {ref!r}: they belong to tenant(s) {tenants}, "
                       f"whose members may; name one of your own jobs (`cuberay queue` and `cuberay history list` show them)")
        return pick_named(ref, mine)

    def require_owner(self, who: Principal, what: str, submitter: str, tenant: str) -> None:
        """Refuse unless ``who`` submitted ``what`` or is an admin of ``tenant``."""
        if not (who.admin or who.user == submitter or self._admin_of(who.user, tenant)):
            self.deny(f"user {who.user!r} may not change {what}: only its submitter ({submitter}) and the admins "
                       f"of tenant {tenant!r} may; ask one of them")

    def platform_tenant(self, name: str) -> Any:
        return self._platform().tenant(name)

    # -------------------------------------------------------------- helpers

    def _tenant(self, name: str) -> Any:
        return next((t for t in self._platform().tenants if t.name == name), None)

    def _member(self, user: str, tenant: str) -> bool:
        t = self._tenant(tenant)
        return t is not None and t.is_member(user)

    def _admin_of(self, user: str, tenant: str) -> bool:
        t = self._tenant(tenant)
        return t is not None and t.is_admin(user)

    def _members(self, tenant: str) -> str:
        t = self._tenant(tenant)
        names = [*t.members, *t.admins] if t is not None else []
        return ", ".join(dict.fromkeys(names)) or "none listed"

    def _admins(self) -> str:
        names = [*self._platform().spec.admins, *([self.installer] if self.installer else [])]
        return ", ".join(dict.fromkeys(names)) or "none listed"

    def deny(self, problem: str, job_id: str | None = None) -> None:
        self.store.add_event("denied", problem, job_id)
        raise AdmissionError(problem)


def _as_caller(caller: Any) -> Caller:
    if isinstance(caller, Caller):
        return caller
    if isinstance(caller, dict):
        try:
            return Caller.model_validate(caller)
        except ValueError as err:
            raise AdmissionError(f"the call names no valid caller ({err.__class__.__name__}); every call says "
                                 f"which user makes it: update the client") from None
    raise AdmissionError(f"the call names no caller (got {type(caller).__name__}); every call says which user "
                         f"makes it (CUBERAY_USER, else the login name): update the client")


def _with(who: Principal, target: Any) -> Principal:
    return dataclasses.replace(who, target=target)


def _verb(method: str) -> str:
    verbs = {"cancel": "cancel", "pipeline_cancel": "cancel", "serve_traffic": "change the traffic of",
             "serve_rollback": "roll back", "serve_delete": "delete"}
    return verbs.get(method, method.replace("_", " "))
