from __future__ import annotations

from datetime import datetime

from control_plane.domain.schemas import ApiIn, ApiOut


class CodeRefIn(ApiIn):
    flag_key: str
    path: str
    line: int
    snippet: str = ""


class CodeRefUpload(ApiIn):
    repository: str
    refs: list[CodeRefIn]
    branch: str = "main"


class UploadResult(ApiOut):
    repository: str
    branch: str
    references: int
    flags: int
    replaced: int


class CodeRef(ApiOut):
    repository: str
    branch: str
    path: str
    line: int
    snippet: str
    uploaded_at: datetime


class FlagCodeRefs(ApiOut):
    flag: str
    references: list[CodeRef]
    count: int


class StaleFlag(ApiOut):
    key: str
    name: str
    created_at: datetime


class StaleFlags(ApiOut):
    flags: list[StaleFlag]
    count: int
