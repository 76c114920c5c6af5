"""schedctl reads --from/--to/--since/--until itself (schedd_client.convert.parse_time, the client
has no schedule code): it must read every UTC or offset time as the server's parser does, and
refuse what it refuses with the same message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.core.schedule import ScheduleError
from schedd.core.schedule import parse_time as server_parse_time
from schedd_client.convert import parse_time


def _both(text: str) -> tuple[object, object]:
    try:
        mine: object = parse_time(text)
    except ValueError as e:
        mine = f"error: {e}"
    try:
        theirs: object = server_parse_time(text, "UTC")
    except ScheduleError as e:
        theirs = f"error: {e}"
    return mine, theirs


@pytest.mark.parametrize("text", [
    "2026-12-01T10:00:00Z", "2026-12-01t10:00:00.1234+02:30", "2026-12-01 10:00:00",
    "2026-12-01T10:00:00-05:00", " 2026-12-01T10:00:00z ", "1899-01-01T00:00:00Z",
    "2026-02-30T00:00:00Z", "2026-12-01T10:00:00+24:00", "2026-12-01T10:00:00+02:60", "nope",
    "0000-01-01T00:00:00Z", "2026-12-01T25:00:00Z", "2026-12-01", "",
])
def test_client_reads_times_as_the_server_does(text: str) -> None:
    mine, theirs = _both(text)
    assert mine == theirs


@settings(max_examples=300, deadline=None)
@given(st.datetimes(), st.sampled_from(["Z", "+00:00", "-03:30", "+14:00", ""]),
       st.integers(0, 999_999))
def test_any_rfc3339_time_reads_the_same(moment, suffix: str, micros: int) -> None:
    text = moment.replace(microsecond=micros).isoformat(timespec="microseconds") + suffix
    mine, theirs = _both(text)
    assert mine == theirs
