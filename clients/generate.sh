#!/usr/bin/env bash
# Generates the clients' code from proto/ (the one definition of every message) with each
# package's buf.gen.yaml: clients/python/src/sigcast/ and clients/node/src/gen/.
#   clients/generate.sh [OUT]   OUT: a directory to generate into instead of the repository
#                               (the test that the committed code is current uses it)
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/install-deps.sh --env)"
out="${1:-.}"
if [ "$out" = . ]; then
  rm -rf clients/python/src/sigcast clients/node/src/gen
fi
ours=(--path proto/sigcast/v1 --path proto/sigcast/operator)
buf generate -o "$out" --template clients/python/buf.gen.yaml proto "${ours[@]}"
buf generate -o "$out" --template clients/node/buf.gen.yaml proto "${ours[@]}"
# google.rpc.Status and its details, for the Node client (Python has googleapis-common-protos).
googleapis=$(python3 -c 'import google.rpc.status_pb2 as s, pathlib; print(pathlib.Path(s.__file__).parents[2])')
buf generate -o "$out" --template clients/node/buf.gen.yaml "$googleapis" \
  --path "$googleapis/google/rpc/status.proto" --path "$googleapis/google/rpc/error_details.proto"
