#!/usr/bin/env bash
# Runs sigcast on the embedded default: a local anvil node (chain id 31337) and the services
# on one SQLite store under ./.sigcast (override with SIGCAST_DATA). Installs what is missing.
# Ctrl-C stops everything.
#
#   SIGCAST_LISTEN   gateway address            (default 127.0.0.1:50051)
#   SIGCAST_DATA     data directory             (default ./.sigcast)
#   ANVIL_PORT       local anvil port           (default 8545)
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(bash scripts/install-deps.sh --env)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sigcast/target}"
data="${SIGCAST_DATA:-$PWD/.sigcast}"
listen="${SIGCAST_LISTEN:-127.0.0.1:50051}"
anvil_port="${ANVIL_PORT:-8545}"
mkdir -p "$data"

cargo build --locked -p sigcast-gateway -p sigcast-cli --bins
bin="$CARGO_TARGET_DIR/debug"

pids=()
stop() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT INT TERM

"$SIGCAST_ANVIL" --port "$anvil_port" --chain-id 31337 >"$data/anvil.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -q "Listening on" "$data/anvil.log" 2>/dev/null && break
  sleep 0.1
done
echo "anvil:   http://127.0.0.1:$anvil_port (chain id 31337, log $data/anvil.log)" >&2

SIGCAST_GATEWAY__LISTEN="$listen" SIGCAST_GATEWAY__STORE__PATH="$data/sigcast.db" \
  "$bin/sigcast-gateway" &
pids+=($!)
echo "gateway: $listen (store $data/sigcast.db) — try: grpcurl -plaintext $listen list" >&2
wait -n "${pids[@]}"
