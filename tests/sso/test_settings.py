"""``VANE_OIDC_*``: single sign-on is off without an issuer, and a half-set configuration names
the variable that is wrong."""

from __future__ import annotations

import pytest

from control_plane.access import Role
from control_plane.sso import SsoSettings, sso_settings_from_env

COMPLETE = {
    "VANE_OIDC_ISSUER": "https://sso.example.com/realms/acme",
    "VANE_OIDC_CLIENT_ID": "vane",
    "VANE_OIDC_CLIENT_SECRET": "s3cret",
    "VANE_OIDC_REDIRECT_URL": "https://vane.example.com/console/sso/callback",
}


def test_without_an_issuer_single_sign_on_is_off() -> None:
    assert sso_settings_from_env({}) is None
    assert sso_settings_from_env({"VANE_OIDC_ISSUER": " ", "VANE_OIDC_CLIENT_ID": "x"}) is None


def test_a_complete_configuration() -> None:
    settings = sso_settings_from_env(
        {
            **COMPLETE,
            "VANE_OIDC_ALLOWED_DOMAINS": "Example.com, example.org ,",
            "VANE_OIDC_ROLE_CLAIM": "groups",
            "VANE_OIDC_ROLE_MAP": "vane-admins=admin, vane-eng=editor,role=ops=viewer",
            "VANE_OIDC_DEFAULT_ROLE": "editor",
        }
    )
    assert settings == SsoSettings(
        issuer="https://sso.example.com/realms/acme",
        client_id="vane",
        client_secret="s3cret",
        redirect_url="https://vane.example.com/console/sso/callback",
        allowed_domains=("example.com", "example.org"),
        role_claim="groups",
        role_map={"vane-admins": Role.ADMIN, "vane-eng": Role.EDITOR, "role=ops": Role.VIEWER},
        default_role=Role.EDITOR,
    )


def test_the_defaults() -> None:
    settings = sso_settings_from_env(COMPLETE)
    assert settings is not None
    assert settings.allowed_domains == ()
    assert settings.role_claim is None
    assert settings.role_map == {}
    assert settings.default_role == "viewer"


def test_plain_http_only_on_this_machine() -> None:
    local = sso_settings_from_env({**COMPLETE, "VANE_OIDC_ISSUER": "http://127.0.0.1:8080"})
    assert local is not None
    with pytest.raises(ValueError, match="VANE_OIDC_ISSUER must be an https URL"):
        sso_settings_from_env({**COMPLETE, "VANE_OIDC_ISSUER": "http://sso.example.com"})
    with pytest.raises(ValueError, match="VANE_OIDC_ISSUER must be an https URL"):
        sso_settings_from_env({**COMPLETE, "VANE_OIDC_ISSUER": "sso.example.com"})


@pytest.mark.parametrize(
    "missing", ["VANE_OIDC_CLIENT_ID", "VANE_OIDC_CLIENT_SECRET", "VANE_OIDC_REDIRECT_URL"]
)
def test_a_half_configuration_names_what_is_missing(missing: str) -> None:
    environ = {name: value for name, value in COMPLETE.items() if name != missing}
    with pytest.raises(ValueError, match=f"^{missing} must be set when VANE_OIDC_ISSUER is$"):
        sso_settings_from_env(environ)
    with pytest.raises(ValueError, match=f"^{missing} must be set"):
        sso_settings_from_env({**environ, missing: "  "})


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("VANE_OIDC_DEFAULT_ROLE", "owner", "VANE_OIDC_DEFAULT_ROLE: 'owner' is not a role"),
        ("VANE_OIDC_ROLE_MAP", "vane-admins=root", "VANE_OIDC_ROLE_MAP: 'root' is not a role"),
        ("VANE_OIDC_ROLE_MAP", "vane-admins", "VANE_OIDC_ROLE_MAP: 'vane-admins' is not"),
        ("VANE_OIDC_ROLE_MAP", "=admin", "VANE_OIDC_ROLE_MAP: '=admin' is not"),
    ],
)
def test_an_unknown_role_or_a_malformed_map_names_the_variable(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        sso_settings_from_env({**COMPLETE, variable: value})
