#!/usr/bin/env bash
# Runs sigcast on the embedded default: the gateway, signer and broadcaster as separate
# processes on one SQLite store under ./.sigcast (override with SIGCAST_DATA), against a local
# anvil and a local Solana node (sigcast-solana-dev), whose dev accounts' keys are imported
# into encrypted keystores and funded — or against an existing node: SIGCAST_EVM_RPC=https://…
# (comma-separated for several endpoints). Installs what is missing. Ctrl-C stops everything.
#
#   SIGCAST_EVM_RPC     existing node(s) instead of a local anvil and Solana node; keys then
#                       come from SIGCAST_KEYSTORE_DIR with SIGCAST_SIGNER_PASSPHRASE
#   SIGCAST_LISTEN      gateway address            (default 127.0.0.1:50051)
#   SIGCAST_SIGNER_LISTEN       signer address     (default 127.0.0.1:50052)
#   SIGCAST_BROADCASTER_LISTEN  broadcaster health (default 127.0.0.1:50053)
#   SIGCAST_DATA        data directory             (default ./.sigcast)
#   ANVIL_PORT          local anvil port           (default 8545)
#   SOLANA_PORT         local Solana node port     (default 8899)
#   SIGCAST_BIN_DIR     use the binaries already built there instead of building
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(bash scripts/install-deps.sh --env)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sigcast/target}"
data="${SIGCAST_DATA:-$PWD/.sigcast}"
listen="${SIGCAST_LISTEN:-127.0.0.1:50051}"
signer_listen="${SIGCAST_SIGNER_LISTEN:-127.0.0.1:50052}"
broadcaster_listen="${SIGCAST_BROADCASTER_LISTEN:-127.0.0.1:50053}"
mkdir -p "$data"

if [ -n "${SIGCAST_BIN_DIR:-}" ]; then
  bin="$SIGCAST_BIN_DIR"
else
  cargo build --locked -p sigcast-gateway -p sigcast-signer -p sigcast-broadcaster -p sigcast-cli \
    -p sigcast-e2e --bins
  bin="$CARGO_TARGET_DIR/debug"
fi

pids=()
stop() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT INT TERM

port_free() { # host:port — refuse to start a local node beside something already listening
  if (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; then
    echo "something already listens on $1: stop it, or choose another port (ANVIL_PORT, SOLANA_PORT)" >&2
    return 1
  fi
}

wait_port() { # host:port
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2; return 1
}

keys="${SIGCAST_KEYSTORE_DIR:-$data/keys}"
if [ -n "${SIGCAST_EVM_RPC:-}" ]; then
  rpc_list="$SIGCAST_EVM_RPC"
  first="${rpc_list%%,*}"
  chain_id=$(curl -fsS -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}' "$first" |
    python3 -c 'import json,sys; print(int(json.load(sys.stdin)["result"], 16))')
  : "${SIGCAST_SIGNER_PASSPHRASE:?set SIGCAST_SIGNER_PASSPHRASE for the keystores in $keys}"
  echo "node:    $rpc_list (chain id $chain_id)" >&2
else
  anvil_port="${ANVIL_PORT:-8545}"
  port_free "127.0.0.1:$anvil_port"
  "$SIGCAST_ANVIL" --port "$anvil_port" --host 127.0.0.1 --chain-id 31337 --block-time 1 >"$data/anvil.log" 2>&1 &
  pids+=($!)
  wait_port "127.0.0.1:$anvil_port"
  rpc_list="http://127.0.0.1:$anvil_port"
  chain_id=31337
  # A dev passphrase for the dev keys of a local chain; a real deployment brings its own.
  export SIGCAST_SIGNER_PASSPHRASE="${SIGCAST_SIGNER_PASSPHRASE:-sigcast-dev}"
  echo "anvil:   $rpc_list (chain id 31337, block time 1 s, log $data/anvil.log)" >&2

  solana_port="${SOLANA_PORT:-8899}"
  port_free "127.0.0.1:$solana_port"
  "$bin/sigcast-solana-dev" --listen "127.0.0.1:$solana_port" >"$data/solana.log" 2>&1 &
  pids+=($!)
  wait_port "127.0.0.1:$solana_port"
  solana_rpc="http://127.0.0.1:$solana_port"
  echo "solana:  $solana_rpc (cluster \"localnet\", a slot every 400 ms, log $data/solana.log)" >&2

  # Local chains start empty at every run, so the store that recorded their operations does too.
  if [ -e "$data/sigcast.db" ]; then
    echo "local chains start empty: starting a new store (the old one is $data/sigcast.db.old)" >&2
    for suffix in "" -wal -shm; do
      if [ -e "$data/sigcast.db$suffix" ]; then mv "$data/sigcast.db$suffix" "$data/sigcast.db.old$suffix"; fi
    done
  fi
fi
urls=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1].split(",")))' "$rpc_list")

store="[store]
path = \"$data/sigcast.db\""
chain="[[evm_chains]]
chain_id = $chain_id
rpc_urls = $urls"
if [ -n "${solana_rpc:-}" ]; then
  chain="$chain
[[solana_clusters]]
cluster = \"localnet\"
rpc_urls = [\"$solana_rpc\"]"
fi

cat >"$data/signer.toml" <<TOML
listen = "$signer_listen"
unix_socket = "$data/signer.sock"
keystore_dir = "$keys"
$store
$chain
TOML
cat >"$data/broadcaster.toml" <<TOML
listen = "$broadcaster_listen"
signer_url = "unix:$data/signer.sock"
$store
$chain
TOML
cat >"$data/gateway.toml" <<TOML
listen = "$listen"
$store
[chains]
evm_chain_ids = [$chain_id]
TOML

if [ -z "${SIGCAST_EVM_RPC:-}" ]; then
  "$bin/sigcast-signer" --config "$data/signer.toml" keys import-dev --count 4 >/dev/null
  # Solana dev accounts 0 and 1 (the test mnemonic at m/44'/501'/i'/0'), 1,000 SOL each;
  # account 1 signs with durable nonces (two nonce accounts), account 0 with recent blockhashes.
  sol_keys=$("$bin/sigcast-signer" --config "$data/signer.toml" keys import-dev --algorithm ed25519 --count 2)
  for key in $sol_keys; do
    answer=$(curl -fsS -H 'content-type: application/json' --data \
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"requestAirdrop\",\"params\":[\"$key\",1000000000000]}" \
      "$solana_rpc")
    case "$answer" in
      *'"result"'*) ;;
      *) echo "airdrop to $key failed: $answer" >&2; exit 1 ;;
    esac
  done
  nonce_authority=$(echo "$sol_keys" | sed -n 2p)
  "$bin/sigcast-signer" --config "$data/signer.toml" nonce create --cluster localnet \
    --authority "$nonce_authority" --count 2 >/dev/null
  echo "solana dev accounts (1,000 SOL each): $(echo $sol_keys) — the second signs with durable nonces" >&2
fi
"$bin/sigcast-signer" --config "$data/signer.toml" 2>>"$data/signer.log" &
pids+=($!)
wait_port "$signer_listen"
"$bin/sigcast-broadcaster" --config "$data/broadcaster.toml" 2>>"$data/broadcaster.log" &
pids+=($!)
"$bin/sigcast-gateway" --config "$data/gateway.toml" &
pids+=($!)
wait_port "$listen"
echo "signer:      $data/signer.sock, callers checked by uid; health on $signer_listen (keys $keys, log $data/signer.log)" >&2
echo "broadcaster: health on $broadcaster_listen (log $data/broadcaster.log)" >&2
echo "gateway:     $listen (store $data/sigcast.db) — try: grpcurl -plaintext $listen list" >&2
wait -n "${pids[@]}"
