"""Where local clusters pick their ports: $SCHEDD_PORT_BAND keeps parallel runs apart (the suite's
two xdist workers, several `schedd local`s); a malformed band is refused with its name."""

from __future__ import annotations

import pytest

from schedd.runtime.cluster import PORT_BAND_ENV, port_band, restartable_ports


def test_a_band_bounds_the_base_so_every_port_fits(monkeypatch):
    monkeypatch.setenv(PORT_BAND_ENV, "21000-21099")
    assert port_band(10) == (21000, 21090)
    for _ in range(20):
        base = restartable_ports(10)
        assert 21000 <= base and base + 9 <= 21099


@pytest.mark.parametrize("spec", ["21000", "a-b", "900-2000", "21000-21005", "60000-70000"])
def test_a_malformed_band_is_refused_by_name(monkeypatch, spec):
    monkeypatch.setenv(PORT_BAND_ENV, spec)
    with pytest.raises(ValueError, match=PORT_BAND_ENV):
        port_band(10)


def test_without_a_band_the_ports_are_below_the_ephemeral_range(monkeypatch):
    monkeypatch.delenv(PORT_BAND_ENV, raising=False)
    lo, hi = port_band(9)
    assert 1024 < lo < hi and hi + 9 <= 65536
