"""The console's numbered pages (``control_plane/console/pager.py``): what a page asked for
becomes, and which page numbers are linked."""

from __future__ import annotations

from control_plane.console.pager import Pager, number_of, size_of


def test_a_page_size_is_one_of_the_choices_and_a_page_a_positive_number() -> None:
    assert [size_of(t) for t in ("100", "500", "7", "", "-50", "abc", "5000")] == [
        100,
        500,
        50,
        50,
        50,
        50,
        50,
    ]
    assert [number_of(t) for t in ("3", "0", "", "-2", "x", "41")] == [3, 1, 1, 1, 1, 41]


def test_a_page_past_the_end_is_the_last_and_an_empty_list_has_one() -> None:
    pager = Pager("/console/flags", {}, total=2003, size=50, asked=999)
    assert (pager.pages, pager.page, pager.offset) == (41, 41, 2000)
    assert (pager.first_item, pager.last_item) == (2001, 2003)
    empty = Pager("/console/flags", {}, total=0, size=50, asked=3)
    assert (empty.pages, empty.page, empty.offset, empty.first_item) == (1, 1, 0, 0)


def test_the_numbers_linked_are_the_ends_and_the_pages_near_the_current_one() -> None:
    def numbers(page: int, total: int = 2003) -> list[int | None]:
        return Pager("/console/flags", {}, total=total, size=50, asked=page).numbers()

    assert numbers(1) == [1, 2, 3, None, 41]
    assert numbers(20) == [1, None, 18, 19, 20, 21, 22, None, 41]
    assert numbers(4) == [1, 2, 3, 4, 5, 6, None, 41]
    assert numbers(41) == [1, None, 39, 40, 41]
    assert numbers(1, total=120) == [1, 2, 3]


def test_a_page_link_keeps_the_filters_given_and_a_size_not_the_default() -> None:
    filters = {"q": "bulk 1&2", "tag": "", "archived": "only"}
    pager = Pager("/console/flags", filters, total=900, size=100, asked=1)
    assert pager.href(9) == "/console/flags?q=bulk+1%262&archived=only&size=100&page=9"
    plain = Pager("/console/flags", {"q": ""}, total=900, size=50, asked=1)
    assert plain.href(18) == "/console/flags?page=18"
