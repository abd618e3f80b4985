"""A minimal OTLP/gRPC trace receiver for tests: accepts ExportTraceServiceRequest on the
port it prints, and appends one JSON line per span to the file named on the command line:
{"trace_id", "span_id", "parent_span_id", "name", "kind", "status", "service", "instance",
"op_id", "attributes", "attribute_types", "events"} — attributes and events whole, so tests can
scan what was exported; kind as its OTLP name (SPAN_KIND_SERVER), status as {"code":
STATUS_CODE_ERROR, "message"}, each attribute's OTLP value type (string_value, int_value).

Usage: otlp_receiver.py OUTPUT_FILE   (prints "listening on PORT" once ready)
"""

import json
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

LOCK = threading.Lock()


def text(value):
    kind = value.WhichOneof("value")
    return "" if kind is None else str(getattr(value, kind))


def attribute(attributes, key):
    for kv in attributes:
        if kv.key == key:
            value = kv.value
            return value.string_value or str(value.int_value or "")
    return None


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, path):
        self.path = path

    def Export(self, request, context):
        lines = []
        for resource_spans in request.resource_spans:
            service = attribute(resource_spans.resource.attributes, "service.name")
            instance = attribute(resource_spans.resource.attributes, "service.instance.id")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": trace_pb2.Span.SpanKind.Name(span.kind),
                        "status": {
                            "code": trace_pb2.Status.StatusCode.Name(span.status.code),
                            "message": span.status.message,
                        },
                        "service": service,
                        "instance": instance,
                        "op_id": attribute(span.attributes, "sigcast.op_id"),
                        "attributes": {kv.key: text(kv.value) for kv in span.attributes},
                        "attribute_types": {kv.key: kv.value.WhichOneof("value") for kv in span.attributes},
                        "events": [
                            {"name": e.name, "attributes": {kv.key: text(kv.value) for kv in e.attributes}}
                            for e in span.events
                        ],
                    }))
        with LOCK, open(self.path, "a", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(sys.argv[1]), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on {port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
