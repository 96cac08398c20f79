"""Who may call a controller method: the caller each call carries, and the rule each method declares.

Pure (pydantic only), so the client, the CLI and the controller share it without Ray.

Every call names its caller (:class:`Caller`): the user it acts for and, for the platform's own processes, a
credential. A job's driver holds its attempt's secret; the platform's components (the pipeline and serving
components inside the controller) hold the platform's own. Inside one shared Ray cluster the user name is the
caller's claim (docs/security.md): the rules keep honest users and scripts apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, TypeVar

from pydantic import BaseModel, ConfigDict, Field

# The environment variable a job's driver (and every process of its job) finds its attempt's secret in.
TOKEN_ENV = "CUBERAY_DRIVER_TOKEN"
# Who a call acts for: the person's claim, or, in a job's processes, the job's submitter (set by the launcher).
USER_ENV = "CUBERAY_USER"


class Caller(BaseModel):
    """Who makes a call: the user it acts for, and the credential of a driver or of the platform itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: str = Field(min_length=1, max_length=253,
                      description="The user the call acts for (CUBERAY_USER, else the login name).")
    token: str | None = Field(default=None, repr=False,
                              description="A job driver's attempt secret, or the platform's own credential; "
                                          "None for a person's call.")
    tenant: str | None = Field(default=None, max_length=63,
                               description="The caller's own default tenant (CUBERAY_TENANT): used by a call "
                                           "that names no tenant and whose spec names none, before the "
                                           "platform file's defaults.")


class Who(str, Enum):
    """Who passes a rule (a platform admin passes every rule a person can pass)."""

    USER = "user"            # any named caller; the answer holds only what the caller may read
    MEMBER = "member"        # a member or admin of the tenant the call is about, or that job's own driver
    OWNER = "owner"          # the job's (run's) submitter or an admin of its tenant, or that job's own driver
    DRIVER = "driver"        # the job's own driver: it holds the secret of the job's current attempt
    ADMIN = "admin"          # a platform admin: spec.admins of the platform file, and who installed it
    PLATFORM = "platform"    # the platform's own components only


class Over(str, Enum):
    """What a rule is about, named by one parameter of the method."""

    NOTHING = "-"
    TENANT = "tenant"        # a tenant name (None: the caller's own tenant)
    JOB = "job"              # a job id or name
    RUN = "run"              # a pipeline run id, or a pipeline name (its latest run)


_WHO_TEXT = {
    Who.USER: "any user; answers hold only what the caller may read",
    Who.MEMBER: "members and admins of the {over}'s tenant{driver}",
    Who.OWNER: "the {over}'s submitter and its tenant's admins{driver}",
    Who.DRIVER: "the job's own driver (its attempt's secret)",
    Who.ADMIN: "platform admins",
    Who.PLATFORM: "the platform's own components",
}


@dataclass(frozen=True)
class Rule:
    """One method's rule: ``who`` may call it about what its parameter ``param`` names (``over``).

    With ``optional``, a call whose ``param`` is None is about nothing in particular: any user may make it,
    and the answer holds only what the caller may read.
    """

    who: Who
    over: Over = Over.NOTHING
    param: str | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        if (self.over == Over.NOTHING) != (self.param is None):
            raise ValueError(f"a rule about {self.over.value} names its parameter (param={self.param!r})")

    def describe(self) -> str:
        """The rule in words (docs/security.md's table is made of these)."""
        driver = ", and the job's own driver" if self.over == Over.JOB else ""
        text = _WHO_TEXT[self.who].format(over=self.over.value, driver=driver)
        if self.who == Who.MEMBER and self.over == Over.TENANT:
            text = "members and admins of the tenant, and drivers of its jobs"
        if self.optional:
            text += f"; without `{self.param}`, any user, answered with what the caller may read"
        return text


def anyone() -> Rule:
    return Rule(Who.USER)


def member(over: Over, param: str, optional: bool = False) -> Rule:
    return Rule(Who.MEMBER, over, param, optional)


def owner(over: Over, param: str) -> Rule:
    return Rule(Who.OWNER, over, param)


def driver(param: str = "job_id") -> Rule:
    return Rule(Who.DRIVER, Over.JOB, param)


def admin() -> Rule:
    return Rule(Who.ADMIN)


READS = "reads"  # the controller actor's concurrency group for reads (control/snapshot.py)


@dataclass(frozen=True)
class Endpoint:
    """One controller method as the protocol declares it: its rule, what it does, where it runs."""

    name: str
    rule: Rule
    summary: str
    reads: bool = False  # answered on the reads thread from the published snapshot and the store

    @property
    def concurrency_group(self) -> str | None:
        return READS if self.reads else None


F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "__cuberay_endpoint__"


def declare(rule: Rule, summary: str, *, reads: bool = False) -> Callable[[F], F]:
    """Give a method of the protocol its rule (checked against its parameters) and its summary."""
    def mark(fn: F) -> F:
        import inspect

        if rule.param is not None and rule.param not in inspect.signature(fn).parameters:
            raise TypeError(f"the rule of {fn.__name__} is about parameter {rule.param!r}, which it does not have")
        setattr(fn, ATTRIBUTE, Endpoint(fn.__name__, rule, summary, reads))
        return fn
    return mark
