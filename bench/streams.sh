#!/usr/bin/env bash
# Warm archive throughput, provender side by side with nginx serving the same file: 1 and 4
# parallel downloads over HTTP/1.1 and over HTTP/2 (each download on its own connection), and 4
# downloads multiplexed on one HTTP/2 connection. Aggregate MiB/s = bytes of all downloads / wall
# time; every answer's status and size is checked. BENCHMARKS.md explains the figures.
#
#   bench/streams.sh            full run: 128 MiB archive, 7 runs of each figure (~3 min)
#   bench/streams.sh --quick    smoke run: 24 MiB archive, 2 runs (~1 min)
#
# Options:
#   --skip-build   use the existing target/release/provender (or $PROVENDER_BIN)
#   --out FILE     also write the table of figures to FILE
#   --keep         keep the work directory (fixtures, configs, logs) and print its path
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

source bench/lib.sh
bench_args "$@"

if [ $QUICK = 1 ]; then BIG_MIB=24 REPS=2; else BIG_MIB=128 REPS=7; fi
MID_MIB=1

bench_tools
bench_workdir provender-streams
bench_machine
bench_build
bench_pki
bench_origin "$BIG_MIB" "$MID_MIB"
read -r ORIGIN_PORT NGINX_PORT PROVENDER_PORT <<<"$(free_ports 3)"
start_origin origin "$ORIGIN_PORT"

# nginx serves the origin's copy of the archive, with HTTP/2 offered as provender offers it.
nginx_conf mirror "$NGINX_PORT" "$WORK/origin/files" auto "" "ssl http2"
start_nginx mirror "$NGINX_PORT"
NGINX_PID=$STARTED
NGINX_ARCHIVE=https://127.0.0.1:$NGINX_PORT/bench/big/1.0.0/$BIG_ZIP

provender_conf "$WORK/provender.toml" "$PROVENDER_PORT" "$WORK/cache" "$ORIGIN_PORT"
start_provender "$WORK/provender.toml" "$PROVENDER_PORT" "$WORK/provender.log"
PROVENDER_PID=$STARTED
PROVENDER_URL=https://127.0.0.1:$PROVENDER_PORT
PROVENDER_ARCHIVE=$PROVENDER_URL/$HOST/bench/big/$BIG_ZIP
fetch "$PROVENDER_URL/$HOST/bench/big/1.0.0.json"
fetch "$PROVENDER_ARCHIVE"
wait_h1 "$PROVENDER_URL" big 1.0.0
check_big "$NGINX_ARCHIVE"
check_big "$PROVENDER_ARCHIVE"
for url in "$NGINX_ARCHIVE" "$PROVENDER_ARCHIVE"; do
    [ "$(curl -sS --http2 --cacert "$CA" -o /dev/null -w '%{http_version}' "$url")" = 2 ] \
        || die "$url does not answer over HTTP/2"
done

cpu_ticks() { # nginx|provender
    if [ "$1" = nginx ]; then cpu_ticks_of $(tree_pids "$NGINX_PID"); else cpu_ticks_of "$PROVENDER_PID"; fi
}

log "warm archive: $BIG_ZIP ($((BIG_BYTES >> 20)) MiB), $REPS run(s) of each figure"
FIGURES=("h1 1" "h1 4" "h2 1" "h2 4" "mux 4")
for rep in $(seq "$REPS"); do
    for figure in "${FIGURES[@]}"; do
        read -r proto n <<<"$figure"
        order="nginx provender"
        [ $((rep % 2)) = 0 ] && order="provender nginx"
        for side in $order; do
            url=$NGINX_ARCHIVE
            [ $side = provender ] && url=$PROVENDER_ARCHIVE
            ticks=$(cpu_ticks $side)
            case $proto in
                h1) mibps=$(parallel_download "$url" "$n" "$BIG_BYTES" --http1.1) ;;
                h2) mibps=$(parallel_download "$url" "$n" "$BIG_BYTES" --http2) ;;
                mux) mibps=$(multiplexed_download "$url" "$n" "$BIG_BYTES") ;;
            esac
            cpu_s=$(calc "($(cpu_ticks $side) - $ticks) / $TICK_HZ / ($n * $BIG_BYTES / 2**30)")
            printf '  run %s, %s x%s, %s: %.0f MiB/s, %.2f CPU s/GiB\n' "$rep" "$proto" "$n" "$side" "$mibps" "$cpu_s" >&2
            record "streams.$proto.$n.$side.mibps" "$mibps"
            record "streams.$proto.$n.$side.cpu_s" "$cpu_s"
        done
    done
done

python3 bench/report.py streams "$RESULTS" | tee ${OUT:+"$OUT"}
