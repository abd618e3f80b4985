"""What the chart's monitoring (monitoring/alerts.yaml, monitoring/dashboard.json) queries.

  monitoring.py queries CHART_DIR   every PromQL expression of an alert or a dashboard panel,
      as JSON: [{"source", "expr", "metrics": {name: [labels matched]}, "by": [labels]}];
      Grafana's variables are replaced by values PromQL accepts ($__rate_interval → 5m,
      $namespace → .*)
  monitoring.py rules CHART_DIR     the rule file's groups, as JSON
"""

import json
import re
import sys
from pathlib import Path

import yaml

METRIC = re.compile(r"\b((?:sigcast|process)_[a-z0-9_]+)\s*(\{[^}]*\})?")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def grafana_to_promql(expr):
    return expr.replace("$__rate_interval", "5m").replace("$namespace", ".*")


def describe(source, expr):
    metrics = {}
    for name, selector in METRIC.findall(expr):
        labels = MATCHER.findall(selector) if selector else []
        metrics.setdefault(name, [])
        metrics[name] = sorted(set(metrics[name]) | set(labels))
    by = sorted({label.strip() for group in GROUPING.findall(expr)
                 for label in group.split(",") if label.strip()})
    return {"source": source, "expr": expr, "metrics": metrics, "by": by}


def main():
    command, chart = sys.argv[1], Path(sys.argv[2])
    rules = yaml.safe_load((chart / "monitoring/alerts.yaml").read_text())
    if command == "rules":
        print(json.dumps(rules))
        return
    queries = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            queries.append(describe(f"alert {rule['alert']}", rule["expr"]))
    dashboard = json.loads((chart / "monitoring/dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries.append(describe(f"panel {panel['title']!r}", grafana_to_promql(target["expr"])))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(metric, label): the metric must have the label.
            metric, label = re.match(r"label_values\((\w+),\s*(\w+)\)",
                                     variable["definition"]).groups()
            queries.append({"source": f"variable {variable['name']}", "expr": None,
                            "metrics": {metric: []}, "by": [label]})
    print(json.dumps(queries))


main()
