"""The relay ⇄ control-plane websocket protocol (binary frames, msgpack, tagged by ``type``).

A relay connects with its ``rsk_`` key and sends ``Hello`` with the snapshot version it holds per
environment. The control plane answers ``Welcome`` (the environments the key may read), then per
environment: nothing (the relay is current), ``Patch`` messages in order (it is a few versions
behind), or one ``SnapshotMessage`` (anything else). Afterwards every committed change arrives
the same way. Both sides send ``Ping`` every ``heartbeat_ms`` and answer with ``Pong``; the
control plane's ``Ping`` also names the environments the relay may read and the newest version
committed for each, so a relay the hub failed to reach still knows it is behind; a relay's
``Ping`` names the versions it refused (``Refused``: a snapshot its engine would not compile). A
relay that wants an environment's full snapshot (after refusing a patch) sends ``Hello`` without
that environment in ``versions``. A deleted environment is announced by a new ``Welcome`` that
no longer names it: the relay drops it.

``Access`` travels with snapshots: hashes of the public and server keys that may call a relay,
so a relay checks keys locally and a revoked key stops at every relay with the next patch.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from shared.wire.snapshot import (
    SCHEMA_VERSION,
    ExperimentSnapshot,
    FlagSnapshot,
    SegmentSnapshot,
    Snapshot,
    WireStruct,
)


class AccessKey(WireStruct, frozen=True):
    id: str
    kind: str  # "public" | "server" | "management" | "relay"
    hash: str  # sha256 hex of the full token
    origins: tuple[str, ...] = ()
    environment: str | None = None  # a server key bound to this environment evaluates its flags
    # kept out of the props of the events sent with the key, before they are spooled
    private_attributes: tuple[str, ...] = ()


class Access(WireStruct, frozen=True):
    keys: tuple[AccessKey, ...] = ()


class Message(msgspec.Struct, tag_field="type", rename="camel", frozen=True, omit_defaults=True):
    """Base of protocol messages."""


class Hello(Message, tag="hello", frozen=True):
    relay: str  # the relay's self-chosen id (for logs and metrics)
    versions: dict[str, int] = {}
    schema_version: int = SCHEMA_VERSION


class Welcome(Message, tag="welcome", frozen=True):
    environments: tuple[str, ...]
    heartbeat_ms: int


class SnapshotMessage(Message, tag="snapshot", frozen=True):
    snapshot: Snapshot
    access: Access


class Patch(Message, tag="patch", frozen=True):
    """Turns version ``from_version`` of ``environment`` into ``version``."""

    environment: str
    from_version: int
    version: int
    generated_at: int = 0
    flags: dict[str, FlagSnapshot] = {}
    removed_flags: tuple[str, ...] = ()
    segments: dict[str, SegmentSnapshot] = {}
    removed_segments: tuple[str, ...] = ()
    access: Access | None = None
    experiments: dict[str, ExperimentSnapshot] = {}
    removed_experiments: tuple[str, ...] = ()


class Refused(WireStruct, frozen=True):
    """A version of an environment a relay would not serve (its snapshot does not compile)."""

    version: int
    reason: str


class Ping(Message, tag="ping", frozen=True):
    sent_at: int  # epoch milliseconds
    environments: dict[str, int] | None = None
    """From the control plane: every environment the relay may read, with the newest version
    committed for it. A relay serving less reports itself behind (whatever the hub managed to
    send); one serving an environment not named drops it (deleted, its keys with it)."""
    refused: dict[str, Refused] | None = None
    """From a relay: the environments whose newest version it refused (and serves an older one
    instead), by key; ``{}`` when it refuses none, None from a relay too old to say. Sent with
    every heartbeat and at once when it changes, so the control plane reports what relays
    refuse, and stops when they recover."""


class Pong(Message, tag="pong", frozen=True):
    sent_at: int  # echoed from the Ping


ToRelay = Welcome | SnapshotMessage | Patch | Ping | Pong
ToControlPlane = Hello | Ping | Pong

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_to_relay: msgspec.msgpack.Decoder[ToRelay] = msgspec.msgpack.Decoder(ToRelay)
_to_control_plane: msgspec.msgpack.Decoder[ToControlPlane] = msgspec.msgpack.Decoder(ToControlPlane)


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def decode_to_relay(data: bytes) -> ToRelay:
    return _to_relay.decode(data)


def decode_to_control_plane(data: bytes) -> ToControlPlane:
    return _to_control_plane.decode(data)


def diff(old: Snapshot, new: Snapshot, access: Access | None = None) -> Patch:
    """The patch that turns ``old`` into ``new`` (flags and segments compared by value, after
    identity: a snapshot patched from another shares every item the patch left alone)."""
    return Patch(
        environment=new.environment,
        from_version=old.version,
        version=new.version,
        generated_at=new.generated_at,
        flags=_changed(old.flags, new.flags),
        removed_flags=tuple(sorted(k for k in old.flags if k not in new.flags)),
        segments=_changed(old.segments, new.segments),
        removed_segments=tuple(sorted(k for k in old.segments if k not in new.segments)),
        access=access,
        experiments=_changed(old.experiments, new.experiments),
        removed_experiments=tuple(sorted(k for k in old.experiments if k not in new.experiments)),
    )


def _changed(old: dict[str, T], new: dict[str, T]) -> dict[str, T]:
    if old is new:
        return {}
    return {k: v for k, v in new.items() if (o := old.get(k)) is not v and o != v}


def _patched(items: dict[str, T], changed: dict[str, T], removed: tuple[str, ...]) -> dict[str, T]:
    """``items`` with ``changed`` and without ``removed``, in key order; shared when untouched,
    sorted again only when a key was added (a one-flag patch of 10,000 flags copies, no sort)."""
    if not changed and not removed:
        return items
    result = dict(items)
    for key in removed:
        result.pop(key, None)
    added = not changed.keys() <= result.keys()
    result.update(changed)
    return dict(sorted(result.items())) if added else result


def apply_patch(snapshot: Snapshot, patch: Patch) -> Snapshot:
    """``snapshot`` with ``patch`` applied; the caller checks ``patch.from_version`` first."""
    return Snapshot(
        project=snapshot.project,
        environment=snapshot.environment,
        version=patch.version,
        flags=_patched(snapshot.flags, patch.flags, patch.removed_flags),
        segments=_patched(snapshot.segments, patch.segments, patch.removed_segments),
        schema_version=snapshot.schema_version,
        generated_at=patch.generated_at or snapshot.generated_at,
        experiments=_patched(snapshot.experiments, patch.experiments, patch.removed_experiments),
    )


def patched_keys(patch: Patch) -> tuple[set[str], set[str]]:
    """The keys of the flags and of the segments ``patch`` changes, adds or removes."""
    return {*patch.flags, *patch.removed_flags}, {*patch.segments, *patch.removed_segments}
