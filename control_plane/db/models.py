"""The control plane's tables. Every resource belongs to a project; keys pick the project."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from control_plane.db.types import Json, Key, UTCDateTime, utcnow

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Deployment(Base):
    """One row: this deployment's id (migration 0008), e.g. to name its Redis channel."""

    __tablename__ = "deployment"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)


class IngestGeneration(Base):
    """One row (SQLite): a number that moves on after every committed write of events or
    exposures (see :mod:`control_plane.db.generation`; PostgreSQL counts with a sequence)."""

    __tablename__ = "ingest_generation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    key: Mapped[str] = mapped_column(String(128), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Environment(Base):
    __tablename__ = "environments"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(200))
    # Bumped in the same transaction as every change to what the environment serves.
    snapshot_version: Mapped[int] = mapped_column(BigInteger, default=0)
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")  # of its record
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # turning a flag on or off here asks for confirmation in the console
    critical: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # approvals a change to what this environment serves needs (0: none, changes apply at once)
    required_approvals: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(20))  # management | server | relay | public
    environment_id: Mapped[str | None] = mapped_column(
        ForeignKey("environments.id", ondelete="CASCADE"), nullable=True
    )
    name: Mapped[str] = mapped_column(String(200), default="")
    hint: Mapped[str] = mapped_column(String(40))  # e.g. "vsk_live_ab12…"; never the secret
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    origins: Mapped[list[str]] = mapped_column(Json, default=list)
    # attributes (names or references) taken out of the props of every event sent with the key
    private_attributes: Mapped[list[str]] = mapped_column(Json, default=list, server_default="[]")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # a management key's role (control_plane.access), as a service account's; a personal
    # token's is its person's or less
    role: Mapped[str] = mapped_column(String(16), default="admin", server_default="admin")
    may_turn_off: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # a personal token: it acts as this person, while they are active
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), nullable=True, index=True
    )
    # a management key made by a person or a key: who it is when it reviews (the maker's
    # ``Principal.identity``); None (made by ``vane up``, the CLI, or before 0018): itself
    owner_identity: Mapped[str | None] = mapped_column(String(64), nullable=True)


class User(Base):
    """A person: signs in with a password, or through the identity provider (``sso_subject``).
    Deactivated, they keep their history and lose their sessions and tokens."""

    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)  # lowercased
    name: Mapped[str] = mapped_column(String(200), default="")
    state: Mapped[str] = mapped_column(String(16), default="active")  # active | deactivated
    password_hash: Mapped[str | None] = mapped_column(String(200), nullable=True)  # argon2id
    must_change_password: Mapped[bool] = mapped_column(Boolean, default=False)
    sso_subject: Mapped[str | None] = mapped_column(String(255), nullable=True, unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    deactivated_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Membership(Base):
    """A person's role in a project, and whether they may turn flags off there at once."""

    __tablename__ = "memberships"
    __table_args__ = (PrimaryKeyConstraint("project_id", "user_id"),)

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))
    may_turn_off: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Invitation(Base):
    """An invitation to a project: a single-use link that expires; only its token's hash kept.
    A sign-in link for an existing person (``user_id``) is one too: it sets their password."""

    __tablename__ = "invitations"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    email: Mapped[str] = mapped_column(String(320))
    role: Mapped[str] = mapped_column(String(16))
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), nullable=True
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    invited_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class SignInFailure(Base):
    """A failed password sign-in (never the password): what throttling counts, per account and
    per client address, on every replica."""

    __tablename__ = "sign_in_failures"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    email: Mapped[str] = mapped_column(String(320), index=True)
    address: Mapped[str] = mapped_column(String(64), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)


class SsoPending(Base):
    """A sign-in through the identity provider between leaving and coming back (ten minutes at
    most): its PKCE verifier and nonce stay here, on the server; used once."""

    __tablename__ = "sso_pending"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the state
    pending: Mapped[str] = mapped_column(Text)  # control_plane.sso.PendingSignIn, encoded
    next: Mapped[str] = mapped_column(String(500), default="/console/flags")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)


class ConsoleSession(Base):
    """A browser signed in to the console, as a person in one of their projects or with a
    management key (the cookie is never stored)."""

    __tablename__ = "console_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the cookie
    key_id: Mapped[str | None] = mapped_column(
        ForeignKey("api_keys.id", ondelete="CASCADE"), index=True, nullable=True
    )
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True, nullable=True
    )
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), nullable=True
    )
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Flag(Base):
    __tablename__ = "flags"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    type: Mapped[str] = mapped_column(String(10))
    variations: Mapped[list[dict[str, Any]]] = mapped_column(Json)
    temporary: Mapped[bool] = mapped_column(Boolean, default=True)
    bucket_by: Mapped[str] = mapped_column(String(200), default="key")
    tags: Mapped[list[str]] = mapped_column(Json, default=list)
    client_side: Mapped[bool] = mapped_column(Boolean, default=True)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    archived_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class FlagSetting(Base):
    """A flag's behaviour in one environment: state, fallthrough, rules, targets, prerequisites.

    JSON columns hold the canonical wire forms (see ``shared.wire.snapshot``), weights out of
    100000.
    """

    __tablename__ = "flag_settings"

    flag_id: Mapped[str] = mapped_column(
        ForeignKey("flags.id", ondelete="CASCADE"), primary_key=True
    )
    environment_id: Mapped[str] = mapped_column(
        ForeignKey("environments.id", ondelete="CASCADE"), primary_key=True
    )
    enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    off_variation: Mapped[int] = mapped_column(Integer)
    fallthrough: Mapped[dict[str, Any]] = mapped_column(Json)
    rules: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    targets: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    prerequisites: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    version: Mapped[int] = mapped_column(Integer, default=1)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


@dataclass(slots=True)
class NewFlag:
    """A ``Flag`` row made and not yet written: its columns as plain attributes, for a unit of
    work that makes thousands of flags at once (a project document's apply, and its plan, which
    writes nothing). What checks and describes a flag reads either alike (``FlagRow``);
    ``insert_values`` writes many in one statement. The fields are the table's columns, no more
    and no fewer (a test holds them to it)."""

    id: str
    project_id: str
    key: str
    name: str
    description: str
    type: str
    variations: list[dict[str, Any]]
    temporary: bool
    bucket_by: str
    tags: list[str]
    client_side: bool
    archived: bool
    archived_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(slots=True)
class NewSetting:
    """A ``FlagSetting`` row made and not yet written, as ``NewFlag``."""

    flag_id: str
    environment_id: str
    enabled: bool
    off_variation: int
    fallthrough: dict[str, Any]
    rules: list[dict[str, Any]]
    targets: list[dict[str, Any]]
    prerequisites: list[dict[str, Any]]
    version: int
    updated_at: datetime


FlagRow = Flag | NewFlag
SettingRow = FlagSetting | NewSetting


def insert_values(row: NewFlag | NewSetting) -> dict[str, Any]:
    """A new row's columns, as an ``insert`` of its table takes them."""
    return {name: getattr(row, name) for name in row.__slots__}


class Segment(Base):
    __tablename__ = "segments"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    included: Mapped[list[str]] = mapped_column(Json, default=list)
    excluded: Mapped[list[str]] = mapped_column(Json, default=list)
    # keys of other kinds: [{"contextKind": ..., "values": [...]}] (``shared.wire.ContextKeys``)
    included_contexts: Mapped[list[dict[str, Any]]] = mapped_column(
        Json, default=list, server_default="[]"
    )
    excluded_contexts: Mapped[list[dict[str, Any]]] = mapped_column(
        Json, default=list, server_default="[]"
    )
    rules: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class CodeReference(Base):
    __tablename__ = "code_references"
    __table_args__ = (
        Index("ix_code_references_flag", "project_id", "flag_key"),
        Index("ix_code_references_repository", "project_id", "repository"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    repository: Mapped[str] = mapped_column(String(300))
    branch: Mapped[str] = mapped_column(String(200))
    flag_key: Mapped[str] = mapped_column(String(128))
    path: Mapped[str] = mapped_column(Text)
    line: Mapped[int] = mapped_column(Integer)
    snippet: Mapped[str] = mapped_column(Text, default="")
    uploaded_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class AuditEntry(Base):
    __tablename__ = "audit_entries"
    __table_args__ = (
        Index("ix_audit_entries_resource", "project_id", "resource_type", "resource_key", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # sortable: newest is largest
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    actor_key_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    actor_user_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    actor: Mapped[str] = mapped_column(String(200), default="")  # the person's email, or the key
    action: Mapped[str] = mapped_column(String(64))
    resource_type: Mapped[str] = mapped_column(String(32))
    resource_key: Mapped[str] = mapped_column(String(128))
    environment: Mapped[str | None] = mapped_column(String(128), nullable=True)
    before: Mapped[Any] = mapped_column(Json, nullable=True)
    after: Mapped[Any] = mapped_column(Json, nullable=True)


class Event(Base):
    """The one event store: every path (server, management, relay, browser) lands here.

    Keyed by ``(project_id, event_id)``, unique per project forever: the database, not a
    check-then-insert, decides what is a duplicate. An event sent without an ``eventId`` is given
    one where it is first stored (relay spool or control plane). Three indexes only, as each costs
    every ingested event: the key, newest first, and analysis (which also serves ``unit`` lookups).
    """

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_ts", "project_id", "ts"),
        # per metric: one event name's rows in unit order, value included (index-only scans)
        Index(
            "ix_events_analysis", "project_id", "event", "unit", "ts", postgresql_include=["value"]
        ),
    )

    # No foreign key to projects: a per-row check on every ingested event buys nothing, as
    # projects are never deleted through the API.
    project_id: Mapped[str] = mapped_column(Key(40), primary_key=True)
    event_id: Mapped[str] = mapped_column(Key(200), primary_key=True)
    unit: Mapped[str] = mapped_column(Key(200))
    event: Mapped[str] = mapped_column(Key(200))
    value: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # minor units
    currency: Mapped[str | None] = mapped_column(String(3), nullable=True)
    props: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    url: Mapped[str | None] = mapped_column(Text, nullable=True)
    ts: Mapped[int] = mapped_column(BigInteger)  # epoch milliseconds
    received_at: Mapped[int] = mapped_column(BigInteger)  # epoch milliseconds
    source: Mapped[str] = mapped_column(String(16))  # server | management | relay | browser


class Metric(Base):
    """An analysis-time definition over events: which event, how aggregated, which way is up."""

    __tablename__ = "metrics"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(200))
    event: Mapped[str] = mapped_column(String(200))
    aggregation: Mapped[str] = mapped_column(String(16))  # sum|mean|count|conversion|ratio|quantile
    direction: Mapped[str] = mapped_column(String(8))  # higher | lower
    format: Mapped[str] = mapped_column(String(32), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    # outlier capping of sum and mean metrics: each unit's value at most ``capping_value``
    # (absolute) or at that percentile of the pooled units (percentile, 0 < value < 1)
    capping: Mapped[str | None] = mapped_column(String(16), nullable=True)
    capping_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    currency: Mapped[str | None] = mapped_column(String(3), nullable=True)  # sum/mean: only it
    # ratio: ``event``'s per-unit ``numerator`` (sum | count) over the per-unit ``denominator``
    # (sum | count) of ``denominator_event``
    numerator: Mapped[str | None] = mapped_column(String(16), nullable=True)
    denominator_event: Mapped[str | None] = mapped_column(String(200), nullable=True)
    denominator: Mapped[str | None] = mapped_column(String(16), nullable=True)
    quantile: Mapped[float | None] = mapped_column(Float, nullable=True)  # quantile: 0 < q < 1
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Experiment(Base):
    __tablename__ = "experiments"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(200))
    type: Mapped[str] = mapped_column(String(16))  # element | cta | manual
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    url: Mapped[str] = mapped_column(Text, default="*")
    selector: Mapped[str | None] = mapped_column(Text, nullable=True)
    goal: Mapped[str] = mapped_column(String(200))
    # the context kind it randomizes on: units are its keys (``shared.wire.kinds``)
    unit_kind: Mapped[str] = mapped_column(String(64), default="user", server_default="user")
    stats_engine: Mapped[str] = mapped_column(String(16), default="frequentist")
    variants: Mapped[list[dict[str, Any]]] = mapped_column(Json)
    status: Mapped[str] = mapped_column(String(16))  # draft | running | stopped
    primary_metric_id: Mapped[str | None] = mapped_column(
        ForeignKey("metrics.id", ondelete="RESTRICT"), nullable=True
    )
    guardrail_metric_ids: Mapped[list[str]] = mapped_column(Json, default=list)
    cuped: Mapped[bool] = mapped_column(Boolean, default=False)
    version: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # a layer's experiments share its units (migration 0013): ``traffic`` is the share of the
    # layer's buckets it takes (out of 100000), [range_start, range_end) the ones it took when it
    # started (kept after it stops, for a restart; only running experiments hold them)
    layer_id: Mapped[str | None] = mapped_column(
        ForeignKey("layers.id", ondelete="RESTRICT"), nullable=True
    )
    traffic: Mapped[int] = mapped_column(Integer, default=100_000, server_default="100000")
    range_start: Mapped[int | None] = mapped_column(Integer, nullable=True)
    range_end: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # context attributes captured with each exposure, to split results by (migration 0014)
    dimensions: Mapped[list[str]] = mapped_column(Json, default=list, server_default="[]")


class Layer(Base):
    """Experiments that must not share units: each running one holds its own range of the
    layer's buckets (``shared.engine.experiments.place``)."""

    __tablename__ = "layers"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Holdout(Base):
    """A share of units kept out of every experiment of the project (or of one layer), to
    measure the combined effect of what was launched on ``metric_ids``."""

    __tablename__ = "holdouts"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    share: Mapped[int] = mapped_column(Integer)  # out of 100000
    layer_id: Mapped[str | None] = mapped_column(
        ForeignKey("layers.id", ondelete="RESTRICT"), nullable=True
    )
    metric_ids: Mapped[list[str]] = mapped_column(Json, default=list)
    status: Mapped[str] = mapped_column(String(16))  # running | stopped
    version: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Exposure(Base):
    """A unit's first exposure to an experiment (``kind`` experiment, ``subject`` its id), to a
    flag (``kind`` flag, ``subject`` the flag key, ``arm`` the variation index) or to a holdout
    (``kind`` holdout, ``subject`` its id, ``arm`` holdout or general). First one wins."""

    __tablename__ = "exposures"
    __table_args__ = (
        # the key in unit order carries the arm and time: analysis reads only this index
        PrimaryKeyConstraint(
            "project_id", "kind", "subject", "unit", postgresql_include=["arm", "exposed_at"]
        ),
    )

    project_id: Mapped[str] = mapped_column(Key(40))  # no foreign key, as for events
    kind: Mapped[str] = mapped_column(Key(16))
    subject: Mapped[str] = mapped_column(Key(128))
    unit: Mapped[str] = mapped_column(Key(200))
    arm: Mapped[str] = mapped_column(Key(128))  # min(arm) per unit in analysis: byte order
    exposed_at: Mapped[int] = mapped_column(BigInteger)  # epoch milliseconds


class ExposureAttribute(Base):
    """A context attribute's value captured with a unit's first exposure (an experiment's
    ``dimensions``), as text; written with the exposure, first one wins. Keyed in unit order per
    attribute, with the value, so that a split of the results merge-joins it with the units."""

    __tablename__ = "exposure_attributes"
    __table_args__ = (
        PrimaryKeyConstraint(
            "project_id", "kind", "subject", "name", "unit", postgresql_include=["value"]
        ),
    )

    project_id: Mapped[str] = mapped_column(Key(40))
    kind: Mapped[str] = mapped_column(Key(16))
    subject: Mapped[str] = mapped_column(Key(128))
    name: Mapped[str] = mapped_column(Key(200))
    unit: Mapped[str] = mapped_column(Key(200))
    value: Mapped[str] = mapped_column(String(200))


class SequentialLook(Base):
    """Running minimum of always-valid p-values across looks (keeps them monotone) and the
    running intersection of the confidence sequences (relative in percent, and absolute; null is
    unbounded), from which a decision takes its direction."""

    __tablename__ = "sequential_looks"

    subject: Mapped[str] = mapped_column(String(128), primary_key=True)  # experiment id or flag id
    metric: Mapped[str] = mapped_column(String(128), primary_key=True)
    arm: Mapped[str] = mapped_column(String(128), primary_key=True)
    min_p_value: Mapped[float] = mapped_column(Float)
    looks: Mapped[int] = mapped_column(Integer, default=0)
    ci_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    ci_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    difference_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    difference_high: Mapped[float | None] = mapped_column(Float, nullable=True)


class FlagMetric(Base):
    __tablename__ = "flag_metrics"

    flag_id: Mapped[str] = mapped_column(
        ForeignKey("flags.id", ondelete="CASCADE"), primary_key=True
    )
    metric_id: Mapped[str] = mapped_column(
        ForeignKey("metrics.id", ondelete="RESTRICT"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, default=0)


class ScheduledChange(Base):
    """A toggle or rollout step to carry out at ``at``. ``status`` is the claim: the replica that
    moves it from ``pending`` (a conditional UPDATE in the same transaction as the change) is the
    only one that carries it out."""

    __tablename__ = "scheduled_changes"
    __table_args__ = (
        Index("ix_scheduled_changes_due", "status", "at"),
        Index("ix_scheduled_changes_flag", "flag_id", "environment_id", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    flag_id: Mapped[str] = mapped_column(ForeignKey("flags.id", ondelete="CASCADE"))
    environment_id: Mapped[str] = mapped_column(ForeignKey("environments.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    kind: Mapped[str] = mapped_column(String(16))  # toggle | rollout
    enabled: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    fallthrough: Mapped[Any] = mapped_column(Json, nullable=True)
    status: Mapped[str] = mapped_column(
        String(16), default="pending"
    )  # pending|done|failed|cancelled
    reason: Mapped[str] = mapped_column(Text, default="")
    created_by_key_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    created_by: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_by: Mapped[str | None] = mapped_column(String(64), nullable=True)  # replica id


class Webhook(Base):
    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[str]] = mapped_column(Json, default=list)  # type names or patterns
    secret: Mapped[str] = mapped_column(String(200))  # needed to sign; never answered
    description: Mapped[str] = mapped_column(String(500), default="")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")  # If-Match
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class OutboxEvent(Base):
    """A change or decision to notify, written in the transaction that made it (the outbox).
    ``dispatched_at`` is the claim of the fan-out into one delivery per matching webhook."""

    __tablename__ = "outbox_events"
    __table_args__ = (Index("ix_outbox_events_pending", "dispatched_at", "id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # sortable: oldest first
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    type: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    data: Mapped[Any] = mapped_column(Json, nullable=True)
    dispatched_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class WebhookDelivery(Base):
    """One event for one webhook: its id is the ``id`` the receiver de-duplicates on; retried
    until delivered or out of attempts. ``lease_until`` is the claim of the replica sending it."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "event_id"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_webhook", "webhook_id", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event_id: Mapped[str] = mapped_column(ForeignKey("outbox_events.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending|delivered|failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    last_status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str] = mapped_column(Text, default="")
    log: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)  # one entry per attempt
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ExperimentDecision(Base):
    """A decision already announced (a winner, a failed SRM check), so each is sent once."""

    __tablename__ = "experiment_decisions"
    __table_args__ = (PrimaryKeyConstraint("experiment_id", "kind", "value"),)

    experiment_id: Mapped[str] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))  # winner | srm
    value: Mapped[str] = mapped_column(String(128))
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ChangeRequest(Base):
    """A proposed change to what one environment serves (several flags' settings and rules),
    reviewed by others before it is applied (issue #34). ``bases`` holds, per flag, the setting
    version and state it was based on: applying refuses if any moved. ``version`` moves on with
    each edit; only approvals of the current version count."""

    __tablename__ = "change_requests"
    __table_args__ = (
        Index("ix_change_requests_project", "project_id", "status", "id"),
        Index("ix_change_requests_due", "status", "apply_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    environment_id: Mapped[str] = mapped_column(ForeignKey("environments.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(16), default="open")  # open|applied|rejected|closed
    author: Mapped[str] = mapped_column(String(200))  # the person's email or the key's name
    author_identity: Mapped[str] = mapped_column(String(64))  # Principal.identity
    author_user_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    author_key_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    version: Mapped[int] = mapped_column(Integer, default=1)
    changes: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    bases: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)  # flag key -> version, state
    apply_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    applied_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    applied_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")  # why it closed, or a missed applyAt


class ChangeRequestReview(Base):
    """An approval or a rejection of one version of a change request, with a comment."""

    __tablename__ = "change_request_reviews"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # sortable: oldest first
    change_request_id: Mapped[str] = mapped_column(
        ForeignKey("change_requests.id", ondelete="CASCADE"), index=True
    )
    reviewer: Mapped[str] = mapped_column(String(200))
    reviewer_identity: Mapped[str] = mapped_column(String(64))
    reviewer_user_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    reviewer_key_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    decision: Mapped[str] = mapped_column(String(16))  # approve | reject
    comment: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    request_version: Mapped[int] = mapped_column(Integer)
