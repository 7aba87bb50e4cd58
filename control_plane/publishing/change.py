"""What one commit changed in the snapshots, by environment: the message a service gathers
(``Scope.changed``), the publisher takes to this replica's hub, and replicas exchange over Redis.

The package has one direction: ``change`` (this message) ← ``hub`` (builds and serves each
environment's history) ← ``publisher`` (takes changes to hubs) ← ``stream`` / ``provider_feed``
(the connections).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec

Reason = Literal["access", "experiments", "environment"]
"""What a change altered beyond the keys of flags and segments (see ``Hub.apply``): who may
call the relays (``access``), which experiments run (``experiments``), or anything else, which
compiles the whole environment (``environment``)."""


class EnvironmentChange(msgspec.Struct, forbid_unknown_fields=False):
    """What one commit altered in one environment's snapshot, and the versions it took the
    environment from (``since``) and to (``version``): the environment's row stays locked from
    the commit's first bump to its end, so no other change lies between the two."""

    flags: set[str] = msgspec.field(default_factory=set)
    segments: set[str] = msgspec.field(default_factory=set)
    reasons: set[Reason] = msgspec.field(default_factory=set)
    since: int | None = None
    version: int | None = None

    def merge(self, other: EnvironmentChange) -> None:
        self.flags |= other.flags
        self.segments |= other.segments
        self.reasons |= other.reasons
        if other.since is not None:
            self.since = other.since if self.since is None else min(self.since, other.since)
        if other.version is not None:
            self.version = (
                other.version if self.version is None else max(self.version, other.version)
            )


class Change(msgspec.Struct, forbid_unknown_fields=False):
    """What one commit altered, by environment id (the message replicas exchange over Redis)."""

    project_id: str
    environments: dict[str, EnvironmentChange] = msgspec.field(default_factory=dict)
    origin: str = ""  # the replica that committed it
    removed: set[str] = msgspec.field(default_factory=set)  # environment ids deleted

    def add(
        self,
        environment_ids: Iterable[str],
        *,
        flags: Iterable[str] = (),
        segments: Iterable[str] = (),
        reason: Reason | None = None,
        versions: Mapping[str, int] | None = None,
    ) -> None:
        """Note a change to ``environment_ids``; ``versions``: the version each was bumped to."""
        flag_keys, segment_keys = set(flags), set(segments)
        reasons: set[Reason] = {reason} if reason else set()
        if not (flag_keys or segment_keys or reasons):
            reasons = {"environment"}
        for environment_id in environment_ids:
            version = (versions or {}).get(environment_id)
            since = None if version is None else version - 1
            self.environments.setdefault(environment_id, EnvironmentChange()).merge(
                EnvironmentChange(set(flag_keys), set(segment_keys), set(reasons), since, version)
            )

    def remove(self, environment_id: str) -> None:
        """``environment_id`` was deleted in this commit: nothing is published for it, and every
        relay and provider that reads it drops it (and with it the keys bound to it)."""
        self.environments.pop(environment_id, None)
        self.removed.add(environment_id)

    def __bool__(self) -> bool:
        return bool(self.environments or self.removed)
