"""Flags as code (issue #36): a project as one document, exported, planned against what is live,
and applied through the other domains' own services in one transaction."""
