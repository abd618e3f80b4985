"""Parses OpenMetrics text (what the services serve, as their Content-Type says) from stdin with
the reference Python parser and prints one JSON object: {"<sample name>{<sorted labels>}":
value}. Exits non-zero if the text does not parse.

With --families: {"<family>": {"type": ..., "samples": [sample names], "labels": [label
names]}} instead, every declared family included, with or without samples."""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

families = {}
samples = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    described = families.setdefault(family.name, {"type": family.type, "samples": [], "labels": []})
    for sample in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
        samples[f"{sample.name}{{{labels}}}"] = sample.value
        described["samples"] = sorted(set(described["samples"]) | {sample.name})
        described["labels"] = sorted(set(described["labels"]) | set(sample.labels))
print(json.dumps(families if "--families" in sys.argv[1:] else samples))
