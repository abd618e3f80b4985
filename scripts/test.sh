#!/usr/bin/env bash
# Runs every check and test of sigcast on a fresh machine: installs what is missing
# (scripts/install-deps.sh), then lints the contract, lints and checks the Rust code (with
# the FoundationDB backend compiled in), checks what the dependency graph may hold
# (cargo deny), and runs the whole test suite.
#
# Builds go to $CARGO_TARGET_DIR, by default ~/.cache/sigcast/target, outside the clone, so a
# later clone on the same machine reuses them.
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(bash scripts/install-deps.sh --env)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sigcast/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
step() { printf '\n==> %s\n' "$*" >&2; }

step "buf lint"
buf lint

step "buf breaking"
# Against the main branch as fetched (origin/main) when it differs from what is checked out;
# otherwise against the previous commit, so a commit that breaks the contract is caught.
against=""
if git rev-parse -q --verify origin/main >/dev/null && [ "$(git rev-parse origin/main)" != "$(git rev-parse HEAD)" ]; then
  against="origin/main"
elif git rev-parse -q --verify HEAD~1 >/dev/null; then
  against="HEAD~1"
fi
if [ -n "$against" ] && git ls-tree -r --name-only "$against" -- buf.yaml | grep -q .; then
  buf breaking --against ".git#ref=$(git rev-parse "$against")"
else
  echo "no earlier contract to compare with" >&2
fi

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo deny: bans, licenses, sources (deny.toml)"
# Built once per machine (a few minutes), then found in ~/.cargo/bin. Offline: the advisory
# database lives on GitHub, out of reach here; bans, licenses and sources need only the lock file.
cargo deny --version 2>/dev/null | grep -q ' 0.20.2' || cargo install --locked cargo-deny --version 0.20.2
# Its `cargo metadata` reads the manifest of every package in the lock file, other platforms'
# too (windows-sys, android_system_properties), which no build here downloads: fetched first,
# or a machine whose cache holds only what it built fails this step.
cargo fetch --locked
cargo deny --offline --locked check bans licenses sources

step "cargo check with the FoundationDB backend"
cargo check -p sigcast-store --features fdb --all-targets --locked

step "mutation testing of what the change touched (domain, decision core)"
# The mutants of the lines this change (against the same base as buf breaking) touched in the
# domain crate and the broadcaster's decision core: a mutant no test kills fails the run, unless
# .cargo/mutants.toml lists it as harmless with its reason. The full run is in the README ("How
# we know it holds"). cargo-mutants is installed only when such lines changed.
if [ -n "$against" ]; then
  diff_file="$(mktemp)"
  git diff "$against" -- libs/domain/src libs/protocol/src >"$diff_file"
  if [ -s "$diff_file" ]; then
    cargo mutants --version >/dev/null 2>&1 || cargo install --locked cargo-mutants --version 27.1.0
    cargo mutants --no-shuffle --in-diff "$diff_file" -p sigcast-domain -p sigcast-protocol
  else
    echo "no change to the domain crate or the decision core" >&2
  fi
  rm -f "$diff_file"
fi

step "tests"
# cargo-nextest ships with the machine's toolchain; it runs each test in its own process and
# ends with one summary line. Plain cargo test where it is missing.
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
