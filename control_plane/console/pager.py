"""Numbered pages of a console list: a page size to choose, "1-50 of 2,003", and links that
reach any page in one click (first, previous, the numbers near the current one, next, last) or
by typing its number.

The API pages by cursor (``nextCursor``), which never skips or repeats an item but cannot jump;
a person looking through 2,000 flags wants to jump, so the console asks the same service for a
count and an offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

SIZES = (50, 100, 200, 500)
NEAR = 2  # page numbers shown on each side of the current one


def size_of(text: str) -> int:
    """The page size asked for; anything but one of ``SIZES`` is the first of them."""
    return int(text) if text.isdigit() and int(text) in SIZES else SIZES[0]


def number_of(text: str) -> int:
    """The page asked for, 1 for anything but a positive number (past the end: the last)."""
    return int(text) if text.isdigit() and int(text) > 0 else 1


@dataclass(frozen=True, slots=True)
class Pager:
    path: str  # the list's own path, e.g. ``/console/flags``
    filters: dict[str, str]  # what the list is filtered by, kept from page to page
    total: int
    size: int
    asked: int  # the page asked for, before it is held to the pages there are

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    @property
    def page(self) -> int:
        return min(self.asked, self.pages)

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size

    @property
    def first_item(self) -> int:
        return self.offset + 1 if self.total else 0

    @property
    def last_item(self) -> int:
        return min(self.total, self.offset + self.size)

    @property
    def kept(self) -> dict[str, str]:
        """The query a page link and the page form carry: the filters given and the size."""
        kept = {name: value for name, value in self.filters.items() if value}
        if self.size != SIZES[0]:
            kept["size"] = str(self.size)
        return kept

    def href(self, page: int) -> str:
        return f"{self.path}?{urlencode({**self.kept, 'page': str(page)})}"

    def numbers(self) -> list[int | None]:
        """The page numbers to link: the first, those near the current one, the last; ``None``
        where some are left out."""
        near = range(max(1, self.page - NEAR), min(self.pages, self.page + NEAR) + 1)
        shown = sorted({1, self.pages, *near})
        out: list[int | None] = []
        for number in shown:
            if out and out[-1] is not None and number - out[-1] > 1:
                out.append(None)
            out.append(number)
        return out
