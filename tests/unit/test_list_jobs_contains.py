"""ListJobs' name filter (`name_contains`, the dashboard's text box): the text in any case, with the team,
state and read-rights filters, paged like every listing, the total counting every match."""

from __future__ import annotations

from schedd.core import commands as C
from schedd.core.queries import list_jobs
from tests.support.state import Harness


def test_name_contains_filters_any_case_and_pages():
    h = Harness()
    for name, team in (("etl-daily", "red"), ("etl-hourly", "blue"), ("report", "red"), ("etl-weekly", "red")):
        h.put(name=name, team=team)
    h.apply(C.PAUSE, name="etl-weekly")
    page, nxt, total = list_jobs(h.state, contains="ETL", limit=2)       # names are lower case
    assert [j.name for j in page] == ["etl-daily", "etl-hourly"] and nxt == "etl-hourly" and total == 3
    page, nxt, _ = list_jobs(h.state, contains="etl", limit=2, after=nxt)
    assert [j.name for j in page] == ["etl-weekly"] and nxt == ""
    page, _, total = list_jobs(h.state, contains="ETL", team="red", state="active")
    assert [j.name for j in page] == ["etl-daily"] and total == 1
    page, _, total = list_jobs(h.state, contains="etl", visible={"blue"})
    assert [j.name for j in page] == ["etl-hourly"] and total == 1
    assert list_jobs(h.state, contains="nothing")[2] == 0
