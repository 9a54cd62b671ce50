#!/usr/bin/env bash
# Fleet-wide single fetch: two replicas sharing one store (a shared directory, which enforces
# conditional creates) miss the same archive at once, four clients on each. Measured with
# `cache.fleet_single_fetch` on and off, side by side: the bytes the origin sent (the sum of both
# replicas' provender_upstream_bytes_total) and the time until every client had the whole
# archive. The origin is nginx limited to 50 MiB/s per connection, like a public registry.
#
#   bench/fleet.sh            128 MiB archive, 3 runs of each mode (~2 min)
#   bench/fleet.sh --quick    24 MiB archive, 1 run (~1 min)
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

if [ $QUICK = 1 ]; then BIG_MIB=24 REPS=1; else BIG_MIB=128 REPS=3; fi
CLIENTS_EACH=4

bench_tools
bench_workdir provender-fleet
bench_machine
bench_build
bench_pki
bench_origin "$BIG_MIB" 1
read -r ORIGIN_PORT PORT_A PORT_B <<<"$(free_ports 3)"
start_origin origin "$ORIGIN_PORT" "limit_rate 50m"

# One run: two fresh replicas on a fresh shared directory; prints "origin-MiB seconds".
fleet_run() { # name on|off
    local run=$WORK/$1 shared a b t0 t1 side pids=() bytes=0 i
    shared=$run/shared
    mkdir -p "$shared"
    for side in a b; do
        provender_conf "$run/$side.toml" "$(eval echo \$PORT_${side^^})" "$run/$side" "$ORIGIN_PORT" \
            "backend = \"directory\"
fleet_single_fetch = $([ "$2" = on ] && echo true || echo false)

[cache.object_store]
bucket = \"$shared\""
        start_provender "$run/$side.toml" "$(eval echo \$PORT_${side^^})" "$run/$side.log"
        eval "PID_$side=$STARTED"
    done
    a=https://127.0.0.1:$PORT_A b=https://127.0.0.1:$PORT_B
    for side in "$a" "$b"; do fetch "$side/$HOST/bench/big/1.0.0.json"; done
    t0=$(now)
    for i in $(seq "$CLIENTS_EACH"); do
        for side in "$a" "$b"; do
            curl -sSf --http1.1 --cacert "$CA" --max-time 600 -o /dev/null \
                -w '%{http_code} %{size_download}' "$side/$HOST/bench/big/$BIG_ZIP" >"$run/dl-$i-${#pids[@]}" &
            pids+=($!)
        done
    done
    for i in "${pids[@]}"; do wait "$i" || die "a download failed ($1)"; done
    t1=$(now)
    for i in "$run"/dl-*; do check_answer "$BIG_ZIP" "$BIG_BYTES" "$(cat "$i")"; done
    for side in "$a" "$b"; do
        bytes=$(calc "$bytes + $(metric "$side" provender_upstream_bytes_total)")
    done
    stop "$PID_a"
    stop "$PID_b"
    echo "$(calc "$bytes / 2**20") $(elapsed "$t0" "$t1")"
}

log "two replicas, $CLIENTS_EACH clients each, one $((BIG_BYTES >> 20)) MiB archive; $REPS run(s) of each mode"
for rep in $(seq "$REPS"); do
    order="on off"
    [ $((rep % 2)) = 0 ] && order="off on"
    for mode in $order; do
        read -r mib secs <<<"$(fleet_run "run-$rep-$mode" "$mode")"
        printf '  run %s, fleet_single_fetch %s: origin sent %.1f MiB, all clients done in %.2f s\n' \
            "$rep" "$mode" "$mib" "$secs" >&2
        record "fleet.$mode.origin_mib" "$mib"
        record "fleet.$mode.seconds" "$secs"
    done
done

python3 - "$RESULTS" <<'EOF' | tee ${OUT:+"$OUT"}
import statistics, sys
values = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    values.setdefault(k, []).append(float(v))
med = lambda k: statistics.median(values[k])
size = med("size.big.mib")
print("| `cache.fleet_single_fetch` | origin sent, MiB | archive copies from the origin | all 8 clients done, s | runs |")
print("|---|---|---|---|---|")
for mode in ("off", "on"):
    mib, secs = med(f"fleet.{mode}.origin_mib"), med(f"fleet.{mode}.seconds")
    print(f"| {mode} | {mib:.1f} | {mib / size:.2f} | {secs:.2f} | {len(values[f'fleet.{mode}.seconds'])} |")
print()
print(f"Archive: {size:.1f} MiB; origin limited to 50 MiB/s per connection; median of the runs.")
EOF
