#!/usr/bin/env bash
# Memory under load: one provender (disk backend, warm) under wrk at 1000 connections for ten
# minutes, every connection asking in turn for an index.json, a <version>.json and (one request
# in ten) a 1 MiB archive, while the script records provender's resident memory (VmRSS) every
# 10 seconds. It prints the samples, the request rate and the growth between the third and the
# last three minutes: memory that levels off grows little there. Every answer must be 2xx.
# BENCHMARKS.md explains the figures.
#
#   bench/soak.sh            full run: 10 minutes at 1000 connections
#   bench/soak.sh --quick    smoke run: 1 minute at 200 connections
#
# Options:
#   --skip-build     use the existing target/release/provender (no cargo build)
#   --out FILE       also write the figures to FILE
#   --keep           keep the work directory (fixtures, cache, logs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

source bench/lib.sh
bench_args "$@"

if [ $QUICK = 1 ]; then SECONDS_LOAD=60 CONNS=200; else SECONDS_LOAD=600 CONNS=1000; fi
EVERY=10

bench_tools
bench_workdir provender-soak
bench_machine
bench_build
bench_pki
bench_origin 1 1
read -r ORIGIN_PORT PORT <<<"$(free_ports 2)"
start_origin origin "$ORIGIN_PORT"
provender_conf "$WORK/provender.toml" "$PORT" "$WORK/cache" "$ORIGIN_PORT" 'index_ttl = "1h"'
start_provender "$WORK/provender.toml" "$PORT" "$WORK/provender.log"
PID=$STARTED
BASE=https://127.0.0.1:$PORT
log "warming: every document and archive the load asks for"
warm_provender "$BASE"

cat >"$WORK/mix.lua" <<EOF
-- Each connection walks the same cycle: metadata nine times, an archive once.
local paths = {
  "/$HOST/bench/small/index.json",
  "/$HOST/bench/small/2.3.0.json",
  "/$HOST/bench/small/1.0.0.json",
  "/$HOST/bench/mid/index.json",
  "/$HOST/bench/small/2.0.0.json",
  "/$HOST/bench/small/index.json",
  "/$HOST/bench/mid/1.0.0.json",
  "/$HOST/bench/small/1.3.0.json",
  "/$HOST/bench/small/index.json",
  "/$HOST/bench/mid/$MID_ZIP",
}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i % #paths) + 1])
end
EOF

log "soak: wrk -t2 -c$CONNS -d${SECONDS_LOAD}s, VmRSS every ${EVERY}s"
record rss.0 "$(status_kib "$PID" VmRSS)"
timeout $((SECONDS_LOAD + 60)) wrk -t2 -c"$CONNS" -d"${SECONDS_LOAD}s" --timeout 30s \
    -s "$WORK/mix.lua" "$BASE" >"$WORK/wrk.txt" 2>&1 &
WRK=$!
for t in $(seq "$EVERY" "$EVERY" "$SECONDS_LOAD"); do
    sleep "$EVERY"
    rss=$(status_kib "$PID" VmRSS)
    record "rss.$t" "$rss"
    printf '  %4s s: VmRSS %s KiB\n' "$t" "$rss" >&2
done
wait "$WRK" || { cat "$WORK/wrk.txt" >&2; die "wrk failed"; }
if grep -q "Non-2xx or 3xx responses" "$WORK/wrk.txt"; then
    cat "$WORK/wrk.txt" >&2
    die "provender answered errors under the soak"
fi
kill -0 "$PID" || die "provender died under the soak"
RPS=$(awk '/^Requests\/sec/ { print $2 }' "$WORK/wrk.txt")
ERRORS=$(awk '/Socket errors/ { print }' "$WORK/wrk.txt")

python3 - "$RESULTS" "$SECONDS_LOAD" "$CONNS" "$RPS" "${ERRORS:-Socket errors: none}" <<'PY' | tee "${OUT:-/dev/null}"
import sys
results, seconds, conns, rps, errors = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rss = {}
for line in open(results):
    k, v = line.split()
    if k.startswith("rss."):
        rss[int(k[4:])] = int(v) / 1024
times = sorted(rss)
print(f"{conns} connections for {seconds} s, {float(rps):,.0f} req/s (9 metadata : 1 archive of 1 MiB); {errors.strip()}")
print("VmRSS MiB by time (s): " + ", ".join(f"{t}: {rss[t]:.0f}" for t in times))
third = [rss[t] for t in times if seconds * 0.2 < t <= seconds * 0.3] or [rss[times[len(times) // 3]]]
last = [rss[t] for t in times if t > seconds * 0.7]
a, b = sum(third) / len(third), sum(last) / len(last)
print(f"mean VmRSS {a:.0f} MiB at 20-30 % of the run, {b:.0f} MiB in its last 30 %: growth {100 * (b - a) / a:+.1f} %; peak {max(rss.values()):.0f} MiB")
PY
