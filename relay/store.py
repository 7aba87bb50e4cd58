"""What a relay serves: one compiled snapshot per environment, swapped atomically.

Readers take ``store.get(env)`` once per request and use that immutable ``EnvironmentState``
throughout, so a swap in the middle of a request never mixes two versions; no lock is needed
(the event loop is single-threaded and a dict assignment is atomic). Listeners (SSE streams, the
``/readyz`` view, persistence) hear of each swap.

Compiling happens here, with the garbage collector paused (``gc_paused``): the relay's choice
for its own process, not the engine's.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from shared.engine import CompiledEnvironment, compile_patch, compile_snapshot
from shared.engine.operators import INLINE_SEARCH_UNITS
from shared.engine.rules import search_units
from shared.keys import hash_token
from shared.wire.protocol import Access, AccessKey, Patch, Refused, apply_patch, patched_keys
from shared.wire.snapshot import Snapshot


@contextmanager
def gc_paused() -> Iterator[None]:
    """The garbage collector off, process-wide, for the block (a snapshot compiling); then back
    as it was.

    A deliberate speed choice for the relay, a process of its own whose job is this snapshot:
    compiling allocates about a hundred objects per flag, all kept, so cyclic collections
    triggered on the way would rescan the growing heap again and again (about 40 % of the time
    for 10,000 flags). Reference counting still frees garbage while the collector waits. The
    engine leaves the collector alone, so that the in-process provider (``shared.client``), a
    library inside someone else's application, never pauses that application's collector.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True, slots=True)
class EnvironmentState:
    """One environment's snapshot as the relay holds it (immutable; replaced, never mutated)."""

    environment: str
    version: int
    snapshot: Snapshot
    compiled: CompiledEnvironment
    access: Access
    received_at: float  # wall-clock seconds when this version was accepted (or loaded from disk)
    etag: str
    search_units: int = 0
    """What a bulk evaluation may search, in the search budget's units (``matches`` patterns'
    RE2 instructions, ``contains`` values; ``shared.engine.rules.search_units``). A patch adds
    the units of what it names, so it over-counts until the next full snapshot."""
    tracked: frozenset[str] = frozenset()
    """The flags whose first evaluations are reported as exposures (``track_exposures``). A
    patch updates it for the flags it names, so the first evaluation after a patch does not
    walk the environment to find them."""
    patch: Patch | None = None
    """The patch this state was made with from the version before (None: a whole snapshot), so
    what follows the change (the provider feed's ``patch`` event) costs the change too."""

    @property
    def searches(self) -> bool:
        """Whether evaluations run off the event loop (``relay.routes.evaluation``): the worst
        searches of this environment could hold the loop more than a few milliseconds."""
        return self.search_units > INLINE_SEARCH_UNITS

    @classmethod
    def build(
        cls,
        snapshot: Snapshot,
        access: Access,
        *,
        received_at: float | None = None,
        previous: EnvironmentState | None = None,
    ) -> EnvironmentState:
        """``previous``: the state this one replaces, whose unchanged flags need no compiling."""
        with gc_paused():
            compiled = compile_snapshot(
                snapshot, previous=previous.compiled if previous is not None else None
            )
        return cls(
            environment=snapshot.environment,
            version=snapshot.version,
            snapshot=snapshot,
            compiled=compiled,
            access=access,
            received_at=time.time() if received_at is None else received_at,
            etag=f'"{snapshot.project}.{snapshot.environment}.{snapshot.version}"',
            search_units=search_units(snapshot.flags.values(), snapshot.segments.values()),
            tracked=frozenset(key for key, flag in snapshot.flags.items() if flag.track_exposures),
        )

    @classmethod
    def patched(cls, previous: EnvironmentState, patch: Patch) -> EnvironmentState:
        """``previous`` with ``patch`` applied (the caller checks that it follows): only the
        flags the patch names, and those using what it names, are compiled; every other
        compiled flag is taken over, so applying costs the patch, not the environment."""
        snapshot = apply_patch(previous.snapshot, patch)
        flags, segments = patched_keys(patch)
        with gc_paused():
            compiled = compile_patch(previous.compiled, snapshot, flags=flags, segments=segments)
        return cls(
            environment=snapshot.environment,
            version=snapshot.version,
            snapshot=snapshot,
            compiled=compiled,
            access=patch.access or previous.access,
            received_at=time.time(),
            etag=f'"{snapshot.project}.{snapshot.environment}.{snapshot.version}"',
            search_units=previous.search_units
            + search_units(
                [snapshot.flags.get(k) for k in flags], [snapshot.segments.get(k) for k in segments]
            ),
            tracked=_tracked_after(previous.tracked, snapshot, flags),
            patch=patch,
        )


def _tracked_after(before: frozenset[str], snapshot: Snapshot, named: set[str]) -> frozenset[str]:
    """``before`` (the tracked flags of the previous version) with the ``named`` flags of a
    patch looked at again in ``snapshot``: the cost of the patch, not of the environment."""
    if not named:
        return before
    now = {key for key in named if (flag := snapshot.flags.get(key)) and flag.track_exposures}
    if now == named & before:
        return before
    return (before - named) | now


@dataclass(frozen=True, slots=True)
class Caller:
    """A public or server key presented to the relay, resolved against the snapshots' access."""

    environment: str
    key: AccessKey


Listener = Callable[[EnvironmentState], None]
RemovalListener = Callable[[str], None]


@dataclass
class Store:
    """The relay's current state, and its connection to the control plane."""

    states: dict[str, EnvironmentState] = field(default_factory=dict)
    expected: frozenset[str] | None = None  # environments the control plane said we serve
    connected: bool = False
    last_upstream_message: float = 0.0  # monotonic seconds
    stale_after: float = 30.0
    upstream: str = ""  # the control plane connected to (or tried last)
    offered: dict[str, int] = field(default_factory=dict)  # newest version upstream announced
    # the newest version of each environment the relay refused to serve (it does not compile),
    # until one at least as new is served; and how many versions of each it refused so far
    refusing: dict[str, Refused] = field(default_factory=dict)
    refused_versions: dict[str, int] = field(default_factory=dict)
    _keys: dict[str, Caller] = field(default_factory=dict)
    _listeners: list[Listener] = field(default_factory=list)
    _removal_listeners: list[RemovalListener] = field(default_factory=list)

    def get(self, environment: str) -> EnvironmentState | None:
        return self.states.get(environment)

    def version(self, environment: str) -> int | None:
        state = self.states.get(environment)
        return state.version if state else None

    def versions(self) -> dict[str, int]:
        return {env: state.version for env, state in self.states.items()}

    def is_newer(self, environment: str, version: int) -> bool:
        """Whether ``version`` would move ``environment`` forward (versions never go back)."""
        current = self.states.get(environment)
        return current is None or version > current.version

    def swap(self, state: EnvironmentState) -> None:
        """Make ``state`` current for its environment and tell every listener (the sync client
        checks ``is_newer`` first: what comes from upstream never rolls a version back)."""
        self.states[state.environment] = state
        refused = self.refusing.get(state.environment)
        if refused is not None and state.version >= refused.version:
            del self.refusing[state.environment]  # a good version came: recovered
        self._rebuild_keys()
        for listener in list(self._listeners):
            listener(state)

    def remove(self, environment: str) -> bool:
        """Stop serving ``environment``: its keys stop resolving at once, removal listeners (open
        streams, the disk copy) hear of it. False if it was not served."""
        self.refusing.pop(environment, None)
        if self.states.pop(environment, None) is None:
            return False
        self._rebuild_keys()
        for listener in list(self._removal_listeners):
            listener(environment)
        return True

    def _rebuild_keys(self) -> None:
        keys: dict[str, Caller] = {}
        for env, state in self.states.items():
            for key in state.access.keys:
                # server keys are project-wide: any environment's copy resolves them
                keys.setdefault(key.hash, Caller(env, key))
        self._keys = keys

    def caller(self, token: str) -> Caller | None:
        """The environment and key a bearer token stands for, or None if unknown/revoked."""
        return self._keys.get(hash_token(token))

    def listen(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def listen_removals(self, listener: RemovalListener) -> Callable[[], None]:
        self._removal_listeners.append(listener)
        return lambda: self._removal_listeners.remove(listener)

    def note_offered(self, environment: str, version: int) -> None:
        """Upstream announced ``version`` of ``environment`` (served or not)."""
        if version > self.offered.get(environment, 0):
            self.offered[environment] = version

    def versions_behind(self, environment: str) -> int:
        """How many versions upstream announced beyond the one served (0 when current)."""
        served = self.version(environment) or 0
        return max(0, self.offered.get(environment, 0) - served)

    def refuse(self, environment: str, version: int, reason: str) -> bool:
        """Note that ``version`` of ``environment`` was refused (the last good one is still
        served); True the first time this version is refused (to log it once)."""
        known = self.refusing.get(environment)
        if known is not None and known.version >= version:
            return False
        self.refusing[environment] = Refused(version=version, reason=reason)
        self.refused_versions[environment] = self.refused_versions.get(environment, 0) + 1
        return True

    def upstream_alive(self) -> None:
        self.last_upstream_message = time.monotonic()

    @property
    def stale(self) -> bool:
        """Cut off from the control plane: not connected, or silent for too long."""
        if not self.connected:
            return True
        return time.monotonic() - self.last_upstream_message > self.stale_after

    @property
    def ready(self) -> bool:
        """Serving: a snapshot for every environment the control plane named (or any, before),
        and none of them held back by a version the relay refused."""
        if not self.states or self.refusing:
            return False
        if self.expected is None:
            return True
        return self.expected <= set(self.states)
