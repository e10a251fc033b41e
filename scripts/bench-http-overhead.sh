#!/usr/bin/env bash
# Leaf's single-id route, requests per second with wrk, for two idmint binaries in the same
# run, alternating (three rounds of 8 s after a 2 s warm-up each): the cost per request of
# what one build adds over the other (a before/after check of a change).
#
#   scripts/bench-http-overhead.sh BASELINE_BINARY CANDIDATE_BINARY
#
# Each binary serves `--store memory://` on a free loopback port; a tag `bench` with step
# 100000 is created through the API. Needs wrk and curl.
set -euo pipefail
baseline=$(realpath "$1")
candidate=$(realpath "$2")
run() {
  local dir pid url rps
  dir=$(mktemp -d)
  (cd "$dir" && exec "$1" serve --listen 127.0.0.1:0 --store memory:// > out.txt 2> err.txt) &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$dir/out.txt" 2>/dev/null && break; sleep 0.1; done
  url=$(grep -o 'http://[0-9.:]*' "$dir/out.txt" | head -1)
  curl -s -X POST -H 'content-type: application/json' -d '{"tag":"bench","step":100000}' \
    "$url/v1/tags" > /dev/null
  wrk -t2 -c32 -d2s "$url/api/segment/get/bench" > /dev/null
  rps=$(wrk -t2 -c32 -d8s "$url/api/segment/get/bench" | awk '/Requests\/sec/ {print $2}')
  kill "$pid"
  wait "$pid" 2> /dev/null || true
  rm -rf "$dir"
  echo "$rps"
}
total_b=0
total_c=0
for round in 1 2 3; do
  b=$(run "$baseline")
  c=$(run "$candidate")
  echo "round $round: baseline $b req/s, candidate $c req/s"
  total_b=$(echo "$total_b + $b" | bc -l)
  total_c=$(echo "$total_c + $c" | bc -l)
done
echo "ratio candidate/baseline: $(echo "scale=3; $total_c / $total_b" | bc -l)"
