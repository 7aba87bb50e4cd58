"""Code references: a repository's upload replaces its previous one; stale temporary flags."""

from __future__ import annotations

from sqlalchemy import delete, exists, select

from control_plane.access import Permission
from control_plane.db.models import CodeReference, Flag
from control_plane.db.types import utcnow
from control_plane.domain.coderefs import schemas as s
from control_plane.domain.coderefs.scanner import MAX_SNIPPET
from control_plane.domain.common import Scope
from control_plane.domain.problems import Problems
from control_plane.errors import not_found

MAX_REFS = 50_000
MAX_LINE = 2**31 - 1  # an INTEGER column: PostgreSQL refuses more (500), SQLite stores it


async def upload(scope: Scope, body: s.CodeRefUpload) -> s.UploadResult:
    scope.require(Permission.EDIT)
    problems = Problems()
    if not body.repository.strip() or len(body.repository) > 300:
        problems.add("repository", "1 to 300 characters")
    if not body.branch.strip() or len(body.branch) > 200:
        problems.add("branch", "1 to 200 characters")
    if len(body.refs) > MAX_REFS:
        problems.add("refs", f"at most {MAX_REFS} references per upload")
    for i, ref in enumerate(body.refs):
        if not ref.path.strip():
            problems.add(f"refs[{i}].path", "must not be blank")
        if not 1 <= ref.line <= MAX_LINE:
            problems.add(f"refs[{i}].line", f"lines count from 1 (to {MAX_LINE}, the column's)")
        if not ref.flag_key:
            problems.add(f"refs[{i}].flagKey", "must not be blank")
    problems.raise_if_any()
    removed = await scope.session.execute(
        delete(CodeReference).where(
            CodeReference.project_id == scope.project_id,
            CodeReference.repository == body.repository,
        )
    )
    now = utcnow()
    scope.session.add_all(
        CodeReference(
            project_id=scope.project_id,
            repository=body.repository,
            branch=body.branch,
            flag_key=ref.flag_key,
            path=ref.path,
            line=ref.line,
            snippet=ref.snippet[:MAX_SNIPPET],
            uploaded_at=now,
        )
        for ref in body.refs
    )
    await scope.session.flush()
    result = s.UploadResult(
        repository=body.repository,
        branch=body.branch,
        references=len(body.refs),
        flags=len({r.flag_key for r in body.refs}),
        replaced=int(getattr(removed, "rowcount", 0) or 0),
    )
    scope.audit("code_refs.upload", "repository", body.repository[:128], after=result)
    return result


async def refs_of_flag(scope: Scope, key: str) -> s.FlagCodeRefs:
    flag = await scope.session.scalar(
        select(Flag.id).where(Flag.project_id == scope.project_id, Flag.key == key)
    )
    if flag is None:
        raise not_found("flag", key)
    rows = await scope.session.scalars(
        select(CodeReference)
        .where(CodeReference.project_id == scope.project_id, CodeReference.flag_key == key)
        .order_by(CodeReference.repository, CodeReference.path, CodeReference.line)
    )
    refs = [
        s.CodeRef(
            repository=r.repository,
            branch=r.branch,
            path=r.path,
            line=r.line,
            snippet=r.snippet,
            uploaded_at=r.uploaded_at,
        )
        for r in rows
    ]
    return s.FlagCodeRefs(flag=key, references=refs, count=len(refs))


async def stale_flags(scope: Scope) -> s.StaleFlags:
    """Temporary, live flags that no uploaded repository references: candidates for clean-up."""
    referenced = exists().where(
        CodeReference.project_id == Flag.project_id, CodeReference.flag_key == Flag.key
    )
    rows = await scope.session.scalars(
        select(Flag)
        .where(
            Flag.project_id == scope.project_id,
            Flag.temporary.is_(True),
            Flag.archived.is_(False),
            ~referenced,
        )
        .order_by(Flag.key)
    )
    flags = [s.StaleFlag(key=f.key, name=f.name, created_at=f.created_at) for f in rows]
    return s.StaleFlags(flags=flags, count=len(flags))
