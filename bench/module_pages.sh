#!/usr/bin/env bash
# Module pages over a large cache: MODULES x VERSIONS module versions (10,000 by default)
# written straight into a disk cache, served offline. Measured:
#   - the first modules list after start (the store scan);
#   - the first search, as the first request after start (the store scan, then every
#     module's newest version read for its documentation and kept beside its package as
#     docs.json), and the same after a restart (docs.json read back, no package opened);
#   - under wrk: the modules page, a search, a module version's page (documentation in
#     memory), its API document (requests/s, latency; every answer checked for status 200),
#     each also as a ratio to the same server's static stylesheet measured in the same run;
#   - time to first render (first contentful paint) and to the load event in headless
#     Chromium, for the modules page, a search and a module version page;
#   - the server's peak memory.
#
#   bench/module_pages.sh            500 modules x 20 versions, 5 s wrk runs (~3 min)
#   bench/module_pages.sh --quick    50 modules x 20 versions, 3 s wrk runs
#
# Options: --skip-build (use target/release/provender or PROVENDER_BIN), --out FILE, --keep.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

source bench/lib.sh
bench_args "$@"

if [ $QUICK = 1 ]; then
    MODULES=50 VERSIONS=20 DURATION=3
else
    MODULES=500 VERSIONS=20 DURATION=5
fi
CONNS=16

bench_tools
command -v chromedriver >/dev/null || apt_install chromium-driver
command -v chromium >/dev/null || apt_install chromium
bench_workdir provender-module-pages
bench_machine
bench_build
bench_pki

log "fixture: $MODULES modules x $VERSIONS versions (python3)"
python3 bench/module_fixture.py "$WORK/cache" "$HOST" "$MODULES" "$VERSIONS"
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
start_provender "$CONF" "$PORT" "$WORK/provender.log"
BASE=https://127.0.0.1:$PORT
ONE="$HOST/ns1/m1/aws"
WORD=word$((MODULES / 2))

# The answer must be 200 with a body; prints its size.
size_of() { # url
    local out code size
    out=$(curl -sS --cacert "$CA" -o /dev/null -w '%{http_code} %{size_download}' "$1") || die "$1 failed"
    read -r code size <<<"$out"
    [ "$code" = 200 ] && [ "$size" -gt 0 ] || die "$1 answered $code with $size bytes"
    echo "$size"
}
timed() { # name url
    local t0
    t0=$(now)
    size_of "$2" >/dev/null
    record "$1" "$(elapsed "$t0" "$(now)")"
}
# The search must find exactly the module whose README holds the word.
check_search() {
    local found
    found=$(curl -sS --cacert "$CA" "$BASE/-/api/v1/modules?q=$WORD" \
        | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["total"], " ".join(m["address"] for m in d["summaries"]))')
    [ "$found" = "$((MODULES * VERSIONS)) $HOST/ns$((MODULES / 2 % 20))/m$((MODULES / 2))/aws" ] \
        || die "search for $WORD found: $found"
}

log "first answers after start"
# The very first request: the store scan, then every module's newest package read for its
# documentation (written beside it as docs.json).
timed first.search_s "$BASE/-/modules?q=$WORD"
check_search
timed first.modules_page_s "$BASE/-/modules"
docs=$(find "$WORK/cache/modules" -name docs.json | wc -l)
[ "$docs" -ge "$MODULES" ] || die "only $docs docs.json after the first search"
record docs_json.files "$docs"

log "restart: documentation read back from docs.json"
stop "$STARTED"
start_provender "$CONF" "$PORT" "$WORK/provender.log"
timed restart.search_s "$BASE/-/modules?q=$WORD"
check_search

declare -A PATHS=(
    [anchor.static]="/-/static/provender.css"
    [page.modules]="/-/modules"
    [page.search]="/-/modules?q=$WORD"
    [page.search_all]="/-/search?q=$WORD"
    [page.module_version]="/-/modules/$ONE/1.0.0"
    [api.module_version]="/-/api/v1/modules/$ONE/1.0.0"
    [api.modules]="/-/api/v1/modules?q=$WORD"
)
for name in "${!PATHS[@]}"; do
    record "$name.bytes" "$(size_of "$BASE${PATHS[$name]}")"
done
log "each path alone, wrk -c$CONNS ${DURATION}s"
for name in anchor.static page.modules page.search page.search_all page.module_version api.module_version api.modules; do
    read -r rps p50 p99 _e _n <<<"$(run_wrk "$name" "$CONNS" "$BASE${PATHS[$name]}")"
    printf '  %-20s %9.0f req/s  p50 %7.2f ms  p99 %7.2f ms\n' "$name" "$rps" "$p50" "$p99" >&2
    record "$name.rps" "$rps"
    record "$name.p50_ms" "$p50"
    record "$name.p99_ms" "$p99"
    # Against the same server's smallest answer (a static file), in the same run.
    [ "$name" = anchor.static ] || record "$name.rps_of_static" "$(calc "$rps / $(awk '$1 == "anchor.static.rps" { print $2 }' "$RESULTS")")"
done

log "time to first render in headless Chromium (median of 5)"
python3 bench/first_render.py "$CA" "$BASE/-/modules" "$BASE/-/modules?q=$WORD" \
    "$BASE/-/modules/$ONE/1.0.0" >"$WORK/render.txt"
while read -r url fcp load; do
    case $url in
        */-/modules) name=page.modules ;;
        *\?q=*) name=page.search ;;
        *) name=page.module_version ;;
    esac
    record "$name.first_paint_ms" "$fcp"
    record "$name.load_ms" "$load"
done <"$WORK/render.txt"
record provender.rss_kib "$(status_kib "$STARTED" VmHWM)"

log "figures"
{
    printf '%s modules x %s versions (%s module versions), revision %s\n' "$MODULES" "$VERSIONS" \
        "$((MODULES * VERSIONS))" "$REVISION"
    sort "$RESULTS"
} | tee ${OUT:+"$OUT"}
