#!/usr/bin/env bash
# The pages and the JSON API over a large cache, and the protocol beside them. One provender
# serves a cache of PROVIDERS x VERSIONS small provider versions (imported from a generated
# mirror directory, offline), and this script measures:
#   - the first answer of the catalogue after start (the store scan that builds the snapshot);
#   - the providers page, a provider's page, and the matching API documents under wrk
#     (size, requests/s, latency), every answer checked for status 200;
#   - the network mirror protocol (index.json, a version document, an archive) alone, then
#     again while pages are requested at a steady 50/s, then while other clients request the
#     pages without pause: same run, ratios.
# BENCHMARKS.md explains each figure.
#
#   bench/pages.sh            full run: 1,000 providers x 10 versions, 10 s wrk runs (~4 min)
#   bench/pages.sh --quick    smoke run: 100 providers x 10 versions, 3 s wrk runs (~1 min)
#
# Options:
#   --skip-build     use the existing target/release/provender (no cargo build)
#   --out FILE       also write the table of figures to FILE
#   --keep           keep the work directory (fixture, cache, logs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

source bench/lib.sh
bench_args "$@"

if [ $QUICK = 1 ]; then
    PROVIDERS=100 VERSIONS=10 DURATION=3
else
    PROVIDERS=1000 VERSIONS=10 DURATION=5
fi
CONNS=16        # wrk connections per measured path
PAGE_RATE=50    # page and API requests per second beside the protocol (steady load)
LOAD_CONNS=16   # wrk connections of the flat-out page load beside the protocol

bench_tools
bench_workdir provender-pages
bench_machine
bench_build
bench_pki

log "fixture: $PROVIDERS providers x $VERSIONS versions (python3)"
python3 bench/catalogue_fixture.py "$WORK/fixture" "$HOST" "$PROVIDERS" "$VERSIONS"
read -r PORT <<<"$(free_ports 1)"
CONF=$WORK/provender.toml
cat >"$CONF" <<CONF
[server]
listen = "127.0.0.1:$PORT"
tls_cert = "$CERT"
tls_key = "$KEY"
shutdown_grace = "5s"

[upstream]
allowed_hosts = ["$HOST"]
offline = true

[cache]
dir = "$WORK/cache"
CONF
log "import --allow-unverified ($((PROVIDERS * VERSIONS)) archives)"
t0=$(now)
"$PROVENDER" import --config "$CONF" --allow-unverified "$WORK/fixture" >"$WORK/import.log" 2>&1 \
    || { tail -20 "$WORK/import.log" >&2; die "import failed"; }
record import.seconds "$(elapsed "$t0" "$(now)")"

start_provender "$CONF" "$PORT" "$WORK/provender.log"
BASE=https://127.0.0.1:$PORT
ONE=ns1/p1

# The answer must be 200 with a body; prints its size.
size_of() { # url
    local out code size
    out=$(curl -sS --cacert "$CA" -o /dev/null -w '%{http_code} %{size_download}' "$1") || die "$1 failed"
    read -r code size <<<"$out"
    [ "$code" = 200 ] && [ "$size" -gt 0 ] || die "$1 answered $code with $size bytes"
    echo "$size"
}

log "first catalogue answer after start (builds the snapshot)"
t0=$(now)
size_of "$BASE/-/api/v1/providers" >/dev/null
record catalogue.first_answer_s "$(elapsed "$t0" "$(now)")"
listed=$(curl -sS --cacert "$CA" "$BASE/-/api/v1/providers" \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["total"], sum(p["versions"] for p in d["providers"]))')
[ "$listed" = "$PROVIDERS $((PROVIDERS * VERSIONS))" ] || die "the API lists $listed, not $PROVIDERS $((PROVIDERS * VERSIONS))"

declare -A PATHS=(
    [page.providers]="/-/providers"
    [page.provider]="/-/providers/$HOST/$ONE"
    [page.version]="/-/providers/$HOST/$ONE/1.0.0"
    [page.start]="/"
    [api.providers]="/-/api/v1/providers"
    [api.provider]="/-/api/v1/providers/$HOST/$ONE"
    [api.status]="/-/api/v1/status"
    [proto.index]="/$HOST/$ONE/index.json"
    [proto.version]="/$HOST/$ONE/1.0.0.json"
    [proto.archive]="/$HOST/$ONE/terraform-provider-p1_1.0.0_linux_amd64.zip"
)
for name in "${!PATHS[@]}"; do
    record "$name.bytes" "$(size_of "$BASE${PATHS[$name]}")"
done

wrk_figures() { # name url
    local rps p50 p99 _e _n
    read -r rps p50 p99 _e _n <<<"$(run_wrk "$1" "$CONNS" "$2")"
    printf '  %-16s %9.0f req/s  p50 %7.2f ms  p99 %7.2f ms\n' "$1" "$rps" "$p50" "$p99" >&2
    record "$1.rps" "$rps"
    record "$1.p50_ms" "$p50"
    record "$1.p99_ms" "$p99"
}

log "each path alone, wrk -c$CONNS ${DURATION}s"
for name in page.providers page.provider page.version api.providers api.provider api.status \
    proto.index proto.version proto.archive; do
    wrk_figures "$name" "$BASE${PATHS[$name]}"
done

# The protocol beside the pages, in two ways: people and dashboards (a steady PAGE_RATE
# requests/s over the providers page, a provider page, the list API and status), and a
# worst case (wrk requesting the providers page and list API as fast as it can, which on a
# 2-core machine takes CPU from everything else).
PAGE_URLS=("$BASE/-/providers" "$BASE/-/providers/$HOST/$ONE" "$BASE/-/api/v1/providers" "$BASE/-/api/v1/status")
measure_beside() { # label
    local name
    for name in proto.index proto.version proto.archive; do
        wrk_figures "$name.$1" "$BASE${PATHS[$name]}"
        record "$name.$1.rps_ratio" "$(calc "$(awk -v k="$name.$1.rps" '$1 == k { print $2 }' "$RESULTS") / $(awk -v k="$name.rps" '$1 == k { print $2 }' "$RESULTS")")"
        record "$name.$1.p99_ratio" "$(calc "$(awk -v k="$name.$1.p99_ms" '$1 == k { print $2 }' "$RESULTS") / $(awk -v k="$name.p99_ms" '$1 == k { print $2 }' "$RESULTS")")"
    done
}

log "the protocol while pages are requested at $PAGE_RATE/s"
python3 bench/load.py "$CA" "$PAGE_RATE" $((DURATION * 3 + 3)) "${PAGE_URLS[@]}" >"$WORK/load-steady.txt" &
LOAD=$!
sleep 1
measure_beside steady
wait "$LOAD"
read -r sent failed <"$WORK/load-steady.txt"
[ "$failed" = 0 ] || die "$failed of $sent page requests failed beside the protocol"
record pages.steady.requests "$sent"

log "the protocol while $LOAD_CONNS connections request the providers page and list API flat out"
timeout $((DURATION * 4 + 30)) wrk -t1 -c$((LOAD_CONNS / 2)) -d$((DURATION * 4))s "$BASE/-/providers" \
    >"$WORK/load-page.txt" 2>&1 &
LOAD1=$!
timeout $((DURATION * 4 + 30)) wrk -t1 -c$((LOAD_CONNS / 2)) -d$((DURATION * 4))s "$BASE/-/api/v1/providers" \
    >"$WORK/load-api.txt" 2>&1 &
LOAD2=$!
sleep 1
measure_beside flat_out
kill "$LOAD1" "$LOAD2" 2>/dev/null || true
wait "$LOAD1" "$LOAD2" 2>/dev/null || true
for f in "$WORK/load-page.txt" "$WORK/load-api.txt"; do
    ! grep -q "Non-2xx or 3xx responses" "$f" || { cat "$f" >&2; die "the page load answered errors"; }
done
record provender.rss_kib "$(status_kib "$STARTED" VmHWM)"

log "figures"
{
    printf '%s providers x %s versions (%s archives), revision %s\n' "$PROVIDERS" "$VERSIONS" \
        "$((PROVIDERS * VERSIONS))" "$REVISION"
    sort "$RESULTS"
} | tee ${OUT:+"$OUT"}
