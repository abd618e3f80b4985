"""Parses Prometheus text from stdin with the reference Python parser and prints one JSON
object: {"<sample name>{<sorted labels>}": value}. Exits non-zero if the text does not parse."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families

samples = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
        samples[f"{sample.name}{{{labels}}}"] = sample.value
print(json.dumps(samples))
