"""deploy/: the Prometheus alerting rules pass `promtool check rules` and their unit tests
(`promtool test rules`, synthetic series that fire each alert and series that must not), the
Grafana dashboard's queries parse, and every metric the rules and the dashboard name is one a
real /metrics answer of the API exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient

from tests.support.factories import add_node
from tests.support.prometheus import families, promtool, scrape

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "ampfleet.json"
# Grafana's own variables, as a query would be sent with them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "30s", "$__range": "6h"}
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on"}
PROMQL_WORDS |= {"ignoring", "group_left", "group_right", "atan2"}


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    """Every panel target's expression and every query variable's, with Grafana's
    variables filled in as it sends them."""
    board = json.loads(DASHBOARD.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    exprs = [target["expr"] for panel in panels for target in panel["targets"]]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+), *\w+\)", variable["query"]["query"])
            assert found, variable
            exprs.append(found.group(1))
    for name, value in GRAFANA_VARIABLES.items():
        exprs = [expr.replace(name, value) for expr in exprs]
    return exprs


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label
    matchers, ranges, grouping clauses, function calls, keywords and numbers are out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for found in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", expr):
        name, call = found.groups()
        if not call and name.lower() not in PROMQL_WORDS:
            names.add(name)
    return names


def exported(text: str) -> set[str]:
    """Sample names of an exposition, from its families (a histogram's three)."""
    names = set()
    for name, kind in families(text).items():
        names |= (
            {name + s for s in ("_bucket", "_count", "_sum")} if kind == "histogram" else {name}
        )
    return names


def test_the_rules_are_valid_and_their_unit_tests_pass() -> None:
    checked = run_promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run_promtool("test", "rules", RULE_TESTS.name, cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    names = [rule["alert"] for rule in alerts()]
    assert {"AmpfleetNodeHeartbeatMissing", "AmpfleetQueueWaitHigh", "AmpfleetJobsFailing"} <= {
        *names
    }
    assert {"AmpfleetApiErrors", "AmpfleetGoodputLow"} <= {*names}
    fires = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert (set(names) - fires, set(names) - quiet) == (set(), set())
    for rule in alerts():  # what an on-call reads, and how loud
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert {"summary", "description"} <= rule["annotations"].keys(), rule["alert"]


def test_the_dashboard_queries_parse(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule's expression: a typo fails here."""
    queries = dashboard_queries()
    assert len(queries) > 20
    rules = [{"record": f"dashboard:query{i}", "expr": expr} for i, expr in enumerate(queries)]
    (tmp_path / "dashboard.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    checked = run_promtool("check", "rules", "dashboard.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_is_importable() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert (board["uid"], board["title"]) == ("ampfleet", "ampfleet")
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        if panel["type"] != "row":  # every query goes to the chosen Prometheus
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]


def test_every_metric_named_is_exported(client: TestClient) -> None:
    add_node("n1", slots=4)  # families are there without samples too, but show one node
    text = scrape(client)
    served = exported(text)
    named = {name for expr in dashboard_queries() for name in metric_names(expr)}
    named_by_rules = {name for rule in alerts() for name in metric_names(rule["expr"])}
    # The extraction itself finds what the queries are about (and no function or keyword).
    assert {"ampfleet_jobs_finished_total", "process_cpu_seconds_total"} <= named
    assert "ampfleet_slots_utilization_ratio" in named
    assert "histogram_quantile" not in named | named_by_rules
    assert {"ampfleet_node_up", "ampfleet_http_requests_total"} <= named_by_rules
    assert named - served == set()
    assert named_by_rules - served == set()
