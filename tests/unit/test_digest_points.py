"""DigestPoints: the digest right after a future entry applies, so replicas under load can be
compared at one index (the fault suite's convergence check after a heal)."""

from schedd.replication.node import DigestPoints


def test_a_digest_asked_for_ahead_is_taken_when_the_entry_applies() -> None:
    p = DigestPoints()
    p.ask(105, applied=100)
    assert p.get(105) == "" and p.wanted(105) and not p.wanted(104)
    p.record(105, "abc")
    assert p.get(105) == "abc" and not p.wanted(105)
    p.ask(105, applied=120)                  # asked again: the digest taken stays
    assert p.get(105) == "abc"


def test_an_index_already_applied_cannot_be_asked_for() -> None:
    p = DigestPoints()
    p.ask(100, applied=100)
    assert not p.wanted(100) and p.get(100) == ""


def test_only_the_newest_points_are_kept() -> None:
    p = DigestPoints()
    for i in range(1, 40):
        p.ask(1000 + i, applied=1000)
    assert not p.wanted(1001) and p.wanted(1039)
    assert sum(p.wanted(1000 + i) for i in range(1, 40)) == DigestPoints.MAX
