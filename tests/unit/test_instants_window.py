"""The window `schedctl run list JOB --all-instants` reads, and the stderr line that names it
when the user gave no --since or --until (it used to be a silent 24 h)."""

from __future__ import annotations

from schedd_client.run_commands import DEFAULT_WINDOW_MS, instants_window, window_note

NOW = 1_795_917_600_000            # 2026-11-29T02:00:00Z


def test_the_default_window_is_the_day_before_the_end():
    assert instants_window(None, None, NOW) == (NOW - DEFAULT_WINDOW_MS, NOW)
    assert instants_window(None, NOW - 3_600_000, NOW) == (NOW - 3_600_000 - DEFAULT_WINDOW_MS, NOW - 3_600_000)
    assert instants_window(NOW - 600_000, None, NOW) == (NOW - 600_000, NOW)
    assert instants_window(5, 9, NOW) == (5, 9)


def test_the_note_names_the_window_and_what_was_defaulted():
    assert window_note(NOW - DEFAULT_WINDOW_MS, NOW, True, True) == (
        "schedctl: instants from 2026-11-28T02:00:00Z to 2026-11-29T02:00:00Z (default --since: 24h "
        "before the end, --until: now; give --since/--until for another window)")
    assert "(default --until: now;" in window_note(NOW - 600_000, NOW, False, True)
