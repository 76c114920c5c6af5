"""The golden scenarios of the state machine (tests/unit/testdata/*.txt, driven by
tests/support/golden.py): each file's commands run against a real SchedulerState and their
output must be the file's. `SCHEDD_GOLDEN_REWRITE=1` writes the actual outputs instead (then
read `git diff tests/unit/testdata` before committing: see tests/unit/testdata/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.golden import GoldenError, parse, render, run_file

TESTDATA = Path(__file__).parent / "testdata"
FILES = sorted(TESTDATA.glob("*.txt"))


def test_there_are_scenarios():
    assert FILES, f"no scenario in {TESTDATA}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_golden(path: Path) -> None:
    differs = ""
    try:
        run_file(path)
    except AssertionError as e:
        differs = str(e)
    if differs:
        pytest.fail(differs, pytrace=False)      # the diff alone, not the driver's source


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_scenario_begins_by_saying_what_it_proves_and_what_was_checked(path: Path) -> None:
    head = path.read_text().splitlines()
    assert head[0].startswith("# "), f"{path.name} must begin with a comment saying what it proves"
    comments = " ".join(line for line in head if line.startswith("#")).lower()
    assert "checked" in comments, f"{path.name}: say in a comment what was checked by hand"


SMALL = """# a job is created, then updated
put name=j1 schedule="@every 10s"
----
ok created=true name=j1 version=1

put name=j1 schedule="@every 20s"
----
ok created=false name=j1 version=2
"""


def test_the_file_layout_round_trips():
    assert render(parse(SMALL)) == SMALL


def test_a_changed_expectation_fails_with_a_readable_diff(tmp_path: Path) -> None:
    good = tmp_path / "small.txt"
    good.write_text(SMALL)
    run_file(good, rewrite=False)                       # the real output is the file's
    bad = tmp_path / "bad.txt"
    bad.write_text(SMALL.replace("version=2", "version=3"))
    with pytest.raises(AssertionError) as failed:
        run_file(bad, rewrite=False)
    message = str(failed.value)
    assert "-ok created=false name=j1 version=3" in message
    assert "+ok created=false name=j1 version=2" in message
    assert "SCHEDD_GOLDEN_REWRITE=1" in message
    run_file(bad, rewrite=True)                         # rewriting accepts the actual output
    assert bad.read_text() == SMALL


def test_a_directive_that_cannot_run_fails_even_when_rewriting(tmp_path: Path) -> None:
    typo = tmp_path / "typo.txt"
    typo.write_text("# a typo\nputt name=j1\n----\n")
    with pytest.raises(GoldenError, match=r"typo.txt:2: unknown command 'putt'"):
        run_file(typo, rewrite=True)
