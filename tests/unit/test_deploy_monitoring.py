"""The Prometheus alert rules and the Grafana dashboard in deploy/ load, say what they must, and
(where promtool is installed: CI installs it) pass `promtool check rules` and the rules' own unit
tests (`promtool test rules`, deploy/prometheus/schedd-alerts.test.yml). That every metric they
name is one a node exports is checked against a real node in tests/integration/test_metrics.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "schedd-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "schedd-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "schedd-dashboard.json"
ALERTS = {"ScheddJobNotSucceeded", "ScheddSlaMissed", "ScheddNoLeader", "ScheddNodeLagging",
          "ScheddPoolWithoutWorkers", "ScheddAuditPrunedEarly"}


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bschedd_[a-z_]+\b", expr))


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_every_alert_is_there_with_a_severity_and_what_to_do():
    by_name = {r["alert"]: r for r in rules()}
    assert set(by_name) == ALERTS
    for name, rule in by_name.items():
        assert metric_names(rule["expr"]), name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
    # the job's name is job_name: Prometheus keeps `job` for the scrape job
    assert not any(re.search(r"\bby \(job\b|\{job=", r["expr"]) for r in rules())
    tested = {t["alertname"] for t in yaml.safe_load(RULE_TESTS.read_text())["tests"][0]["alert_rule_test"]}
    assert tested == ALERTS


def test_the_dashboard_loads_and_every_panel_queries_schedd():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["panels"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["targets"] and all(metric_names(t["expr"]) for t in p["targets"]), p["title"]
        assert p["datasource"]["uid"] == "${datasource}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (CI installs it)")
def test_promtool_checks_the_rules_and_runs_their_tests():
    check = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in check.stdout + check.stderr
    run = subprocess.run(["promtool", "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
