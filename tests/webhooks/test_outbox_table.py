"""Every action the control plane audits is either sent to webhooks or deliberately not: a new
audit action cannot be forgotten in the outbox's table (``docs/webhooks.md`` shows the same)."""

from __future__ import annotations

import re

from control_plane.domain.webhooks.outbox import AUDIT_TO_WEBHOOK
from tests.conftest import REPO

NOT_SENT = {"code_refs.upload", "webhook.redeliver", "user.invite"}
# ``scope.audit("flag.toggle", ...)`` and ``action = "environment.rename" if ... else "..."``
_AUDITED = re.compile(
    r'(?:\.audit\(\s*|action = )"([a-z_]+\.[a-z_.]+)"(?:\s+if .*? else "([a-z_.]+)")?'
)


def audited_actions() -> set[str]:
    found: set[str] = set()
    for path in (REPO / "control_plane").rglob("*.py"):
        for match in _AUDITED.finditer(path.read_text()):
            found.update(name for name in match.groups() if name)
    return found


def test_every_audited_action_is_sent_or_listed_as_not_sent() -> None:
    actions = audited_actions()
    assert {"flag.toggle", "environment.rename", "environment.update"} <= actions  # the scan works
    assert actions - set(AUDIT_TO_WEBHOOK) - NOT_SENT == set()
    assert set(AUDIT_TO_WEBHOOK) - actions == set(), "the table names actions nothing audits"
