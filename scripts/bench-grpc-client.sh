#!/usr/bin/env bash
# Issue 9's benchmark, in one run: the Rust client's in-process ids/s and gRPC NextIds
# (the `client_grpc` benchmark, each beside its floor in the same process), then HTTP
# single-id requests/s of `idmint serve` beside a bare hyper server that answers a counter.
# (docs/PERFORMANCE.md reports the client against Tinyid's with scripts/bench-client.)
#
#   scripts/bench-grpc-client.sh
#
# HTTP half: `target/release/idmint serve --store memory://` and the `bare_counter` example
# (crates/idmint-server/examples/bare_counter.rs) on free loopback ports, both running for
# the whole half; a tag `bench` with step 100000 is created through the API. wrk with 2
# threads and 32 connections, 2 s of warm-up on each server, then two rounds of 8 s each,
# idmint and the counter alternating. Needs wrk (apt-get install wrk), curl and bc.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk curl bc; do
  command -v "$tool" > /dev/null || { echo "error: $tool is not installed" >&2; exit 1; }
done

cargo build --release -p idmint-cli --bin idmint
cargo build --release -p idmint-server --example bare_counter
cargo bench -p idmint-client --bench client_grpc

dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

# Starts "$2…" in "$dir/$1" (its own working directory); once it listens, sets `url` to its
# address. Not called in a subshell, so `pids` keeps the server's pid for the cleanup.
start() {
  local name=$1 out
  shift
  mkdir "$dir/$name"
  (cd "$dir/$name" && exec "$@" > out.txt 2> err.txt) &
  pids+=($!)
  out="$dir/$name/out.txt"
  for _ in $(seq 100); do grep -q listening "$out" 2> /dev/null && break; sleep 0.1; done
  grep -q listening "$out" || { echo "error: $name did not start" >&2; cat "$dir/$name/err.txt" >&2; exit 1; }
  url=$(grep -o 'http://[0-9.:]*' "$out" | head -1)
}

# Requests/s of one wrk run of $2 seconds on $1; fails on errors or non-2xx answers.
rps() {
  local report
  report=$(wrk -t2 -c32 -d"$2"s "$1")
  if grep -qE 'Non-2xx|Socket errors' <<< "$report"; then
    echo "error: wrk on $1 saw errors:" >&2
    echo "$report" >&2
    exit 1
  fi
  awk '/Requests\/sec/ {printf "%.0f\n", $2}' <<< "$report"
}

start idmint "$PWD/target/release/idmint" serve --listen 127.0.0.1:0 --store memory://
idmint_url=$url
start bare "$PWD/target/release/examples/bare_counter" 127.0.0.1:0
bare_url=$url
curl -sf -X POST -H 'content-type: application/json' -d '{"tag":"bench","step":100000}' \
  "$idmint_url/v1/tags" > /dev/null
idmint_route="$idmint_url/api/segment/get/bench"
bare_route="$bare_url/"
[ "$(curl -sf "$idmint_route")" -ge 1 ] && [ "$(curl -sf "$bare_route")" -ge 1 ] \
  || { echo "error: a server does not answer an id" >&2; exit 1; }

echo
echo "HTTP: wrk -t2 -c32, GET $idmint_route (idmint) vs GET $bare_route (bare hyper counter)"
rps "$idmint_route" 2 > /dev/null
rps "$bare_route" 2 > /dev/null
idmint_all=()
bare_all=()
total_i=0
total_b=0
for round in 1 2; do
  i=$(rps "$idmint_route" 8)
  b=$(rps "$bare_route" 8)
  echo "round $round: idmint $i req/s, bare counter $b req/s"
  idmint_all+=("$i")
  bare_all+=("$b")
  total_i=$(echo "$total_i + $i" | bc -l)
  total_b=$(echo "$total_b + $b" | bc -l)
done
ratio=$(printf '%.2f' "$(echo "$total_i / $total_b" | bc -l)")
echo
echo "| server | \`GET\` single id, req/s (2 × 8 s) |"
echo "|---|---:|"
echo "| bare hyper counter (baseline) | ${bare_all[0]}, ${bare_all[1]} |"
echo "| idmint \`/api/segment/get/bench\` | ${idmint_all[0]}, ${idmint_all[1]} |"
echo "| **ratio** | **$ratio** |"
