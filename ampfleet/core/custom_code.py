"""Who may run their own code: the one rule, used by bundle uploads and by submits.

A project runs code bundles only where an admin allowed it (`allow_custom_code`, set with
PUT /v1/projects/{name}); a project nobody configured allows it only if it is the default
project, so a newcomer on the embedded default can try, while a shared fleet's tenants
start without it. Roles apply on top: write keys may, read keys may not.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from ampfleet.core.models import Project

DEFAULT_PROJECT = "default"


def custom_code_allowed(session: Session, project: str) -> bool:
    row = session.get(Project, project)
    if row is not None and row.allow_custom_code is not None:
        return row.allow_custom_code
    return project == DEFAULT_PROJECT


def custom_code_refusal(project: str) -> str:
    return (
        f"project {project} does not allow custom code: an admin may allow it with "
        f'PUT /v1/projects/{project} {{"allow_custom_code": true}}'
    )
