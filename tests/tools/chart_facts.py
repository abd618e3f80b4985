"""Reads a rendered chart (multi-document YAML) on stdin; prints JSON facts for the tests:
{"kinds": ["Deployment/x", ...], "containers": [{"workload", "name", "volumes", "secrets",
"security", "pod_security", "probes", "pre_stop", "grace_seconds"}], "configs": {"gateway.toml": "...", ...} (from the
services' config Secret), "configmaps": {key: value} (every ConfigMap's data),
"prometheus_rules": [the spec of each PrometheusRule]}."""

import json
import sys

import yaml

facts = {"kinds": [], "containers": [], "configs": {}}
for doc in yaml.safe_load_all(sys.stdin):
    if not doc:
        continue
    kind, name = doc["kind"], doc["metadata"]["name"]
    facts["kinds"].append(f"{kind}/{name}")
    if kind == "Secret" and name.endswith("-config"):
        facts["configs"].update(doc.get("stringData", {}))
    if kind == "ConfigMap":
        facts.setdefault("configmaps", {}).update(doc.get("data", {}))
    if kind == "PrometheusRule":
        facts.setdefault("prometheus_rules", []).append(doc["spec"])
    if kind != "Deployment":
        continue
    pod = doc["spec"]["template"]["spec"]
    secret_volumes = {
        v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v
    }
    for container in pod.get("initContainers", []) + pod["containers"]:
        mounts = [m["name"] for m in container.get("volumeMounts", [])]
        facts["containers"].append({
            "workload": name,
            "name": container["name"],
            "volumes": mounts,
            "secrets": sorted(secret_volumes[m] for m in mounts if m in secret_volumes),
            "security": container.get("securityContext", {}),
            "pod_security": pod.get("securityContext", {}),
            "probes": sorted(p for p in ("startupProbe", "readinessProbe", "livenessProbe") if p in container),
            "readiness_service": container.get("readinessProbe", {}).get("grpc", {}).get("service", ""),
            "pre_stop": container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command"),
            "grace_seconds": pod.get("terminationGracePeriodSeconds"),
        })
print(json.dumps(facts))
