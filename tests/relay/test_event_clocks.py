"""The one rule for the times a page gives (``shared.wire.events.on_receivers_clock``), over
generated clocks and times in flight: a page's exposure and the purchase it tracked after keep
their order on the relay's clock whichever request took longer, and a clock minutes off is
corrected, never past the time the relay received the request."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.wire.events import SAME_CLOCK_MS, on_receivers_clock

NOW = 1_800_000_000_000  # the page's clock when the variant was shown
IN_FLIGHT = st.integers(min_value=0, max_value=2_000)  # ms a request took to be handled


def _received(ts: int, sent_after: int, offset: int, in_flight: int) -> int:
    """``ts`` (page clock) on the relay's clock, for a request sent ``sent_after`` ms after it
    and handled ``in_flight`` ms later; the relay's clock is ``offset`` ahead of the page's."""
    sent = ts + sent_after
    now = sent + offset + in_flight
    return on_receivers_clock(ts, now - sent, now)


@given(
    offset=st.integers(min_value=-2_000, max_value=2_000),
    gap=st.integers(min_value=0, max_value=60_000),  # the purchase, after the variant was shown
    sent_after=st.integers(min_value=0, max_value=10_000),  # queued before its beacon left
    exposure_in_flight=IN_FLIGHT,
    purchase_in_flight=IN_FLIGHT,
)
def test_a_page_on_time_keeps_its_order_whichever_request_is_handled_first(
    offset: int, gap: int, sent_after: int, exposure_in_flight: int, purchase_in_flight: int
) -> None:
    shown = NOW
    exposure = _received(shown, 0, offset, exposure_in_flight)
    purchase = _received(shown + gap, sent_after, offset, purchase_in_flight)
    assert exposure <= purchase
    if gap:
        assert exposure < purchase


@given(
    offset=st.one_of(
        st.integers(min_value=SAME_CLOCK_MS + 1, max_value=10**9),
        st.integers(min_value=-(10**9), max_value=-(SAME_CLOCK_MS + 2_001)),
    ),
    sent_after=st.integers(min_value=0, max_value=60_000),
    in_flight=IN_FLIGHT,
)
def test_a_clock_far_off_is_corrected_never_past_the_receipt(
    offset: int, sent_after: int, in_flight: int
) -> None:
    ts = NOW
    sent = ts + sent_after
    now = sent + offset + in_flight
    got = on_receivers_clock(ts, now - sent, now)
    assert ts + offset <= got <= now  # not before it happened (relay clock), nor after receipt
    assert got - (ts + offset) <= in_flight
