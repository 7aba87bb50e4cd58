"""The web console: server-rendered pages (Jinja) over the same domain services as the API.

Every write a person makes here goes through ``control_plane.deps.unit_of_work`` and the domain's
``services`` module, exactly as the API's handlers do: same validation and errors, same audit
entries (with the management key that signed in), same versions (``If-Match``) and publishing.
"""
