"""The admin's platform file: tenants, quotas, node pools, storage and scheduler settings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

import cuberay.platform.spec.resources as res
from cuberay.errors import AdmissionError, SpecError
from cuberay.home import home
from cuberay.platform.spec.common import (
    API_VERSION,
    ApiVersion,
    Labels,
    Mount,
    Name,
    NodeResources,
    QuotaResources,
    SpecModel,
    amounts_text,
)
from cuberay.platform.spec.load import FieldError, module_name, over_text
from cuberay.platform.spec.resources import Resources
from cuberay.platform.spec.scheduler import SchedulerSettings
from cuberay.platform.spec.topology import TopologySpec

WILDCARD_MEMBER = "*"
TENANT_ENV = "CUBERAY_TENANT"  # the user's own default tenant, read by the client and carried by each call
_DATABASE_URL = re.compile(r"^[\w+]+://")
_URL_PASSWORD = re.compile(r"^(?P<head>[\w+]+://[^/@:]*):[^/@]*@")


def masked_url(url: str | None) -> str | None:
    """A database URL with its password replaced by ``***`` (SQLAlchemy's own masking, without SQLAlchemy)."""
    return None if url is None else _URL_PASSWORD.sub(r"\g<head>:***@", url)


class Quota(SpecModel):
    """A tenant's share: ``guaranteed`` (Kueue's nominal quota) and ``max`` (nominal + borrowing)."""

    guaranteed: QuotaResources = Field(default_factory=QuotaResources,
                                       description="Resources the tenant can always get back (by reclaiming them "
                                                   "from borrowers). Unlisted resources: 0.")
    max: QuotaResources | None = Field(None, description="The most the tenant may use, borrowing idle capacity. "
                                                         "null = unlimited; a resource not listed here is capped "
                                                         "at its guaranteed amount.")

    @model_validator(mode="after")
    def _max_covers_guaranteed(self) -> Quota:
        if self.max is None:
            return self
        guaranteed, limit = self.guaranteed.by_field(), self.max.by_field()
        for field, vector in guaranteed.items():
            if field in limit and not vector <= limit[field]:
                raise FieldError(["max", *field.split(".")],
                                 f"max {field} {amounts_text(limit[field])} is below guaranteed {amounts_text(vector)}; "
                                 f"raise max or lower guaranteed")
        return self

    def guaranteed_resources(self) -> Resources:
        return self.guaranteed.resources()

    def max_resources(self) -> Resources | None:
        """The cap as a vector (unlisted resources capped at guaranteed), or None for unlimited."""
        if self.max is None:
            return None
        return res.total({**self.guaranteed.by_field(), **self.max.by_field()}.values())


class PoolQuota(Quota):
    """A tenant's quota in one node pool (Kueue: one flavor of its ClusterQueue)."""

    lending_limit: QuotaResources | None = Field(None, description="Most of the pool guarantee lent to other "
                                                 "tenants while idle (Kueue lendingLimit); null = all of it.")


_TAINT = re.compile(r"^(?P<key>[A-Za-z0-9./_-]+)(=(?P<value>[A-Za-z0-9._-]*))?:(?P<effect>NoSchedule|PreferNoSchedule|"
                    r"NoExecute)$")


def _taint(value: str) -> str:
    if not _TAINT.match(value):
        raise ValueError(f"taint {value!r} is not 'key=value:Effect' (Effect NoSchedule, PreferNoSchedule or "
                         f"NoExecute), e.g. 'nvidia.com/gpu=present:NoSchedule'")
    return value


# ---------------------------------------------------------------- platform

class Tenant(SpecModel):
    """A team sharing the platform (CubeStudio's project group, Kueue's ClusterQueue)."""

    name: Name = Field(description="Tenant name, a DNS-1123 label; also its Kubernetes namespace.")
    members: list[str] = Field(default_factory=list, description='Login names that may submit here; "*" lets '
                                                                 'everyone in. Admins are members too.')
    admins: list[str] = Field(default_factory=list, description="Login names that may manage the tenant's jobs.")
    quota: Quota = Field(default_factory=Quota, description="Guaranteed and max resources.")
    priority: int = Field(0, description="Default priority of the tenant's jobs (higher runs first).")
    storage: str | None = Field(None, description="Storage path; default <platform storage>/<tenant name>.")
    mounts: list[Mount] = Field(default_factory=list, description='CubeStudio-style mounts, kept verbatim: '
                                                                '"name(pvc):/mnt", "/data(hostpath):/data".')
    pools: list[Name] | None = Field(None, description="Node pools the tenant may use; null = all of them. A job "
                                      "that names another pool in a node_selector is refused.")
    default_for: list[str] = Field(default_factory=list, description="Logins (members) whose jobs run here when "
                                   "they name no tenant and may use several: a per-member default, before "
                                   "spec.default_tenant. A login is listed in one tenant at most.")
    pool_quotas: dict[str, PoolQuota] = Field(default_factory=dict, description="Quota per node pool, replacing "
                                              "the default split of the cluster-wide quota (in proportion to pool "
                                              "capacity) for that pool; pool name -> {guaranteed, max, "
                                              "lending_limit}.")

    @field_validator("members", "admins", "default_for")
    @classmethod
    def _logins(cls, v: list[str]) -> list[str]:
        for i, login in enumerate(v):
            if not login.strip() or login != login.strip():
                raise FieldError([i], f"login {login!r} is empty or padded with spaces; write the bare name")
        return v

    @field_validator("admins")
    @classmethod
    def _no_wildcard_admin(cls, v: list[str]) -> list[str]:
        if WILDCARD_MEMBER in v:
            raise FieldError([v.index(WILDCARD_MEMBER)], '"*" is only allowed in members; list admins by name')
        return v

    @model_validator(mode="after")
    def _defaults_are_members(self) -> Tenant:
        for i, login in enumerate(self.default_for):
            if login == WILDCARD_MEMBER:
                raise FieldError(["default_for", i], '"*" is not a login: for everyone\'s default set '
                                                     f"spec.default_tenant: {self.name}")
            if not self.is_member(login):
                raise FieldError(["default_for", i], f"{login!r} is not a member of tenant {self.name!r}, so it "
                                                     f"cannot be their default; add them to members too")
        return self

    def is_member(self, user: str) -> bool:
        return user in self.members or user in self.admins or WILDCARD_MEMBER in self.members

    def is_admin(self, user: str) -> bool:
        return user in self.admins

    def guaranteed_resources(self) -> Resources:
        return self.quota.guaranteed_resources()

    def max_resources(self) -> Resources | None:
        return self.quota.max_resources()


class NodePool(SpecModel):
    """A group of identical nodes, for the simulator and for KubeRay worker groups."""

    name: Name = Field(description="Pool name; nodes get the label cuberay.io/pool=<name>.")
    labels: Labels = Field(default_factory=dict, description="Extra node labels of every node in the pool.")
    nodes: int = Field(ge=1, description="How many nodes the pool has.")
    resources: NodeResources = Field(description="What one node offers.")
    taints: list[Annotated[str, AfterValidator(_taint)]] = Field(
        default_factory=list, description="Kubernetes taints of the pool's nodes, 'key=value:Effect'; KubeRay "
                                          "worker pods get the matching tolerations.")

    def node_resources(self) -> Resources:
        return self.resources._request().resources

    def node_labels(self) -> dict[str, str]:
        """Labels of each node: the pool's, the pool name, the card model and the RDMA fabric."""
        offer = self.resources._request()
        return {**self.labels, res.LABEL_POOL: self.name, **offer.node_selector()}


class PlatformSpec(SpecModel):
    """Tenants, node pools, storage and scheduler settings of one platform."""

    storage: str | None = Field(None, description="Directory for the database, logs and tenant storage; null = "
                                "cuberay's home ($CUBERAY_HOME, else ~/.cuberay) on the machine that installs "
                                "the platform.")
    database: str | None = Field(None, description="SQLAlchemy URL, e.g. "
                                "postgresql+psycopg://cuberay@db-host/cuberay (install cuberay[postgres]); null = "
                                "SQLite at <storage>/cuberay.db, which lives and dies with the machine that runs "
                                "the controller.")
    tenants: list[Tenant] = Field(min_length=1, description="The tenants; names are unique.")
    default_tenant: Name | None = Field(None, description="Where a job that names no tenant runs for a user who "
                                        "may use several (after --tenant, metadata.tenant, CUBERAY_TENANT, "
                                        "the user's tenants[].default_for and the one tenant naming the user "
                                        "in members or admins); only for its members. null = none: such a user "
                                        "names a tenant.")
    node_pools: list[NodePool] = Field(default_factory=list, description="Node pools for simulation and KubeRay; "
                                                                         "empty = use the nodes Ray has.")
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings, description="Admission settings.")
    topology: TopologySpec | None = Field(None, description="Levels of closeness of the nodes, widest first, each "
                                          "read from a node label (e.g. block, rack; the host is below them). "
                                          "Jobs ask for one with spec.topology. null = one level, the RDMA "
                                          "domain (cuberay.io/rdma-domain), which RDMA jobs prefer.")
    admins: list[str] = Field(default_factory=list, description="Login names of the platform's admins: they may "
                                                                "apply an edited platform file, stop the platform "
                                                                "and read every tenant's jobs. Whoever started "
                                                                "the controller is one too.")
    kinds: list[Annotated[str, AfterValidator(module_name)]] = Field(
        default_factory=list, description="Python modules of job kinds beyond the built-in ones (plugins), e.g. "
        "mycompany.kinds.batch: each registers its kinds with cuberay.kinds.register when imported. The "
        "controller imports them at start and on reload and passes the list to every job driver it launches "
        "(CUBERAY_KINDS); set CUBERAY_KINDS for the CLI too. They must be importable where the controller and "
        "the drivers run.")

    @field_validator("admins")
    @classmethod
    def _admin_logins(cls, v: list[str]) -> list[str]:
        for i, login in enumerate(v):
            if not login.strip() or login != login.strip() or login == WILDCARD_MEMBER:
                raise FieldError([i], f"admin {login!r} is not a login name; list platform admins by name")
        return v

    @field_validator("database")
    @classmethod
    def _database(cls, v: str | None) -> str | None:
        if v is not None:
            # The shape SQLAlchemy's make_url accepts (dialect[+driver]://...); the store opens it for real.
            # Checked here without importing SQLAlchemy: the spec layer stays free of the database.
            if not _DATABASE_URL.match(v):
                raise ValueError(f"{v!r} is not an SQLAlchemy URL; write e.g. "
                                 f"'postgresql+psycopg://user@host/cuberay' or 'sqlite:////var/lib/cuberay.db'")
        return v

    @field_validator("tenants", "node_pools")
    @classmethod
    def _unique_names(cls, v: list[Any]) -> list[Any]:
        first: dict[str, int] = {}
        for i, item in enumerate(v):
            if item.name in first:
                raise FieldError([i, "name"], f"name {item.name!r} is used at [{first[item.name]}] and [{i}]; "
                                              f"names must be unique, rename one")
            first[item.name] = i
        return v

    @model_validator(mode="after")
    def _defaults(self) -> PlatformSpec:
        names = [t.name for t in self.tenants]
        if self.default_tenant is not None and self.default_tenant not in names:
            raise FieldError(["default_tenant"], f"{self.default_tenant!r} is not a tenant (tenants: "
                                                 f"{', '.join(names)}); name one of them, or null")
        first: dict[str, str] = {}
        for i, tenant in enumerate(self.tenants):
            for j, login in enumerate(tenant.default_for):
                if login in first:
                    raise FieldError(["tenants", i, "default_for", j], f"{login!r} already has tenant "
                                     f"{first[login]!r} as default; a login has one default, remove one")
                first[login] = tenant.name
        return self

    @model_validator(mode="after")
    def _pool_names(self) -> PlatformSpec:
        known = {p.name for p in self.node_pools}
        for i, tenant in enumerate(self.tenants):
            allowed = set(tenant.pools) if tenant.pools is not None else known
            for field, names in (("pools", tenant.pools or []), ("pool_quotas", list(tenant.pool_quotas))):
                for name in names:
                    if name not in known or name not in allowed:
                        why = "is not a node pool" if name not in known else "is not in the tenant's pools"
                        raise FieldError(["tenants", i, field, name], f"pool {name!r} {why} (node pools: "
                                                           f"{', '.join(sorted(known)) or 'none'}); fix the name")
        return self

    @model_validator(mode="after")
    def _fill_storage_and_check_guarantees(self) -> PlatformSpec:
        if self.node_pools:
            promised = res.total(t.guaranteed_resources() for t in self.tenants)
            if over := promised.exceeding(self.capacity()):
                raise FieldError(["tenants"], f"the guaranteed quotas add up to more than the node pools hold "
                                              f"({over_text(over)}); lower the guarantees or add nodes")
        if self.storage is None:  # cuberay's home, known where the platform runs (Platform.tenant_storage)
            return self
        tenants = [t if t.storage else t.model_copy(update={"storage": f"{self.storage.rstrip('/')}/{t.name}"})
                   for t in self.tenants]
        return self.model_copy(update={"tenants": tenants})

    def capacity(self) -> Resources:
        """Total of the node pools (the zero vector when none are declared)."""
        return res.total(p.node_resources() * p.nodes for p in self.node_pools)


class PlatformMeta(SpecModel):
    """Name and labels of a platform."""

    name: Name = Field("local", description="Platform name.")
    labels: Labels = Field(default_factory=dict, description="Free-form labels.")


@dataclass(frozen=True)
class TenantChoice:
    """A resolved tenant and why it was chosen (``text``: "tenant vision (CUBERAY_TENANT)")."""

    tenant: Tenant
    why: str

    @property
    def text(self) -> str:
        return f"tenant {self.tenant.name} ({self.why})"


class Platform(SpecModel):
    """The admin's file: tenants, quotas, node pools (``configs/platform.yaml``)."""

    api_version: ApiVersion = API_VERSION
    kind: Literal["Platform"] = Field("Platform", description="Always Platform.")
    metadata: PlatformMeta = Field(default_factory=PlatformMeta, description="Name and labels.")
    spec: PlatformSpec = Field(description="Tenants, node pools, storage, scheduler settings.")

    @property
    def tenants(self) -> list[Tenant]:
        return self.spec.tenants

    def tenant(self, name: str) -> Tenant:
        """The tenant called ``name``; SpecError listing the known ones if there is none."""
        for tenant in self.spec.tenants:
            if tenant.name == name:
                return tenant
        known = ", ".join(t.name for t in self.spec.tenants)
        raise SpecError(f"unknown tenant {name!r}; known tenants: {known}", path="metadata.tenant")

    def tenants_of(self, user: str) -> list[str]:
        """Names of the tenants ``user`` may submit to (named memberships first, then wildcard ones)."""
        named = [t.name for t in self.spec.tenants if user in t.members or user in t.admins]
        return named + [t.name for t in self.spec.tenants if t.is_member(user) and t.name not in named]

    def resolve_tenant(self, user: str, requested: str | None = None) -> Tenant:
        """The tenant a job of ``user`` runs in (:meth:`choose_tenant` without a spec or an env default)."""
        return self.choose_tenant(user, requested).tenant

    def choose_tenant(self, user: str, requested: str | None = None, *, spec_tenant: str | None = None,
                      preferred: str | None = None) -> TenantChoice:
        """The one tenant resolution, and why: ``requested`` (--tenant), else ``spec_tenant`` (the spec's
        metadata.tenant), else ``preferred`` (the caller's CUBERAY_TENANT), else the user's own default in this
        file (tenants[].default_for), else the only tenant naming them, else spec.default_tenant (for its
        members), else the only tenant open to them.

        Raises:
            SpecError: unknown tenant, or no/several candidate tenants and no default (the fix names each way).
            AdmissionError: ``user`` is not a member of the tenant asked for.
        """
        for name, why in ((requested, "--tenant"), (spec_tenant, "metadata.tenant"), (preferred, TENANT_ENV)):
            if name is not None:
                return TenantChoice(self._asked(user, name, why), why)
        for i, tenant in enumerate(self.spec.tenants):
            if user in tenant.default_for:
                return TenantChoice(tenant, f"your default, tenants[{i}].default_for")
        # Naming a login is more specific than a default for everyone: the one tenant naming the user wins.
        named = [t for t in self.spec.tenants if user in t.members or user in t.admins]
        if len(named) == 1:
            return TenantChoice(named[0], "the only tenant naming you")
        if self.spec.default_tenant is not None and self.tenant(self.spec.default_tenant).is_member(user):
            return TenantChoice(self.tenant(self.spec.default_tenant), "the platform's default_tenant")
        candidates = named or [t for t in self.spec.tenants if t.is_member(user)]
        if len(candidates) == 1:
            return TenantChoice(candidates[0], "your only tenant")
        choice = ", ".join(t.name for t in candidates)
        why = f"user {user!r} is in several tenants ({choice}) and has no default" if candidates else \
            f"user {user!r} is in no tenant (tenants: {', '.join(t.name for t in self.spec.tenants)})"
        fix = (f"set metadata.tenant, pass --tenant or set {TENANT_ENV}; an admin may give a default in the "
               f"platform file (spec.default_tenant, or tenants[].default_for)") if candidates else \
            "ask a tenant's admin to add you to its members"
        raise SpecError(f"{why}; {fix}", path="metadata.tenant")

    def _asked(self, user: str, name: str, why: str) -> Tenant:
        source = f" ({why})" if why == TENANT_ENV else ""
        try:
            tenant = self.tenant(name)
        except SpecError as err:
            raise SpecError(f"{err.reason}{source}", path=None if source else err.path) from None
        if not tenant.is_member(user):
            raise AdmissionError(f"user {user!r} is not a member of tenant {name!r}{source}; pick one of "
                                 f"{self.tenants_of(user) or 'no tenant'} or ask an admin "
                                 f"({', '.join(tenant.admins) or 'none listed'}) to add you")
        return tenant

    def is_admin(self, user: str) -> bool:
        """A platform admin (spec.admins); the controller also counts whoever installed it."""
        return user in self.spec.admins

    def storage_path(self) -> Path:
        return Path(self.spec.storage).expanduser() if self.spec.storage else home()

    def tenant_storage(self, name: str) -> Path:
        """A tenant's storage folder (its own ``storage``, else <platform storage>/<tenant>): checkpoints, Tune
        results, small jobs' logs and pipeline runs go there."""
        tenant = self.tenant(name)
        return Path(tenant.storage or self.storage_path() / tenant.name).expanduser()

    def database_url(self) -> str:
        return self.spec.database or f"sqlite:///{self.storage_path() / 'cuberay.db'}"

    def capacity(self) -> Resources:
        """Total of the node pools (the zero vector when none are declared)."""
        return self.spec.capacity()
