#!/usr/bin/env bash
# provender's benchmarks: every figure is measured side by side with a reference in the same
# run (nginx serving the same files, a direct download from the origin, the terraform CLI), so
# ratios mean something on a noisy machine. Everything runs on loopback, with servers this
# script starts and stops itself. BENCHMARKS.md explains each figure.
#
#   bench/run.sh                full run: 128 MiB archive, 10 s wrk runs, 3 rounds (~10 min)
#   bench/run.sh --quick        smoke run: 24 MiB archive, 3 s wrk runs, 1 round (~2 min)
#
# Options:
#   --skip-build     use the existing target/release/provender (no cargo build)
#   --skip-criterion skip the criterion h1 benchmark (cargo bench)
#   --out FILE       also write the table of figures to FILE
#   --keep           keep the work directory (fixtures, configs, logs) and print its path
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

source bench/lib.sh

CRITERION=1
bench_option() { case $1 in --skip-criterion) CRITERION=0 ;; *) return 1 ;; esac; }
bench_args "$@"

if [ $QUICK = 1 ]; then
    BIG_MIB=24 MID_MIB=6 DURATION=3 ROUNDS=1 REPS=2 COLD_REPS=1 TF_REPS=1 MEM_REPS=1 H1_MIB=16
    CRITERION_ARGS=(--warm-up-time 1 --measurement-time 3)
else
    BIG_MIB=128 MID_MIB=32 DURATION=10 ROUNDS=3 REPS=5 COLD_REPS=5 TF_REPS=3 MEM_REPS=3 H1_MIB=64
    CRITERION_ARGS=(--warm-up-time 3 --measurement-time 15)
fi
CONNS=(64 256)
STREAMS=(1 4)
CLIENTS=100     # concurrent downloads for the memory figures
LINK=50m        # bandwidth of the rate-limited origin (nginx limit_rate: 50 MiB/s)
TERRAFORM=/usr/local/bin/terraform

bench_tools
[ -x "$TERRAFORM" ] || die "the h1 reference and the static mirror need terraform at $TERRAFORM"
bench_workdir provender-bench
bench_machine
bench_build

if [ $CRITERION = 1 ]; then
    log "criterion: h1 hashing (cargo bench --bench h1, ${H1_MIB} MiB payloads)"
    H1_BENCH_MIB=$H1_MIB cargo bench --locked --bench h1 -- "${CRITERION_ARGS[@]}" 2>&1 \
        | tee "$WORK/criterion.log" >&2
    python3 - "$WORK/criterion.log" >>"$RESULTS" <<'EOF'
import re, sys
scale = {"B/s": 2**-20, "KiB/s": 2**-10, "MiB/s": 1, "GiB/s": 2**10}
name = None
for line in open(sys.argv[1]):
    m = re.match(r"^h1/(\w+)", line)
    if m:
        name = m.group(1)
    m = re.search(r"thrpt:\s+\[\S+ \S+ ([\d.]+) (\S+) ", line)
    if m and name:
        print(f"h1.criterion.{name} {float(m.group(1)) * scale[m.group(2)]:.1f}")
EOF
fi

# ---------------------------------------------------------------------------------------------
# PKI, and the origin registry (bench/fixtures.py) served by nginx.
# ---------------------------------------------------------------------------------------------
bench_pki
bench_origin "$BIG_MIB" "$MID_MIB"
read -r ORIGIN_PORT LIMITED_PORT MIRROR_PORT PROVENDER_PORT COLD_PORT <<<"$(free_ports 5)"
start_origin origin "$ORIGIN_PORT"
ORIGIN=https://127.0.0.1:$ORIGIN_PORT
# The same origin behind a link of $LINK per connection (nginx limit_rate), like a fast
# internet connection to a public registry.
start_origin origin-limited "$LIMITED_PORT" "limit_rate $LINK"
LIMITED=https://127.0.0.1:$LIMITED_PORT

# ---------------------------------------------------------------------------------------------
# The static mirror: what `terraform providers mirror` writes, from the same origin.
# ---------------------------------------------------------------------------------------------
terraform_home "$ORIGIN"
MIRROR=$WORK/mirror
log "static mirror: terraform providers mirror (small: every version; mid, big: linux_amd64)"
for v in "${SMALL_VERSIONS[@]}"; do
    tf_config "$WORK/tf-small-$v" small "$v"
    tf "$WORK/tf-small-$v" providers mirror -platform=darwin_amd64 -platform=darwin_arm64 \
        -platform=linux_amd64 -platform=linux_arm64 -platform=windows_amd64 "$MIRROR" >/dev/null
done
tf_config "$WORK/tf-mid" mid 1.0.0
tf "$WORK/tf-mid" providers mirror -platform=linux_amd64 "$MIRROR" >/dev/null
# The big provider's mirror runs are also the h1 reference: download, verify, h1 (timed).
tf_config "$WORK/tf-big" big 1.0.0
for i in $(seq "$TF_REPS"); do
    target=$MIRROR
    [ "$i" = 1 ] || target=$WORK/mirror-big-$i
    t0=$(now)
    tf "$WORK/tf-big" providers mirror -platform=linux_amd64 "$target" >/dev/null
    record h1.terraform_mirror.s "$(elapsed "$t0" "$(now)")"
    [ "$i" = 1 ] || rm -rf "$target"
done

log "static mirror: nginx on 127.0.0.1:$MIRROR_PORT"
nginx_conf mirror "$MIRROR_PORT" "$MIRROR" auto ""
start_nginx mirror "$MIRROR_PORT"
MIRROR_PID=$STARTED
NGINX_URL=https://127.0.0.1:$MIRROR_PORT

# ---------------------------------------------------------------------------------------------
# provender
# ---------------------------------------------------------------------------------------------
log "provender on 127.0.0.1:$PROVENDER_PORT"
provender_conf "$WORK/provender.toml" "$PROVENDER_PORT" "$WORK/cache" "$ORIGIN_PORT"
start_provender "$WORK/provender.toml" "$PROVENDER_PORT" "$WORK/provender.log"
PROVENDER_PID=$STARTED
PROVENDER_URL=https://127.0.0.1:$PROVENDER_PORT
sleep 1
record rss.idle "$(status_kib "$PROVENDER_PID" VmRSS)"

log "warming provender: every document and archive the benchmarks ask for"
warm_provender "$PROVENDER_URL"
for doc in small/index.json small/2.3.0.json; do
    for side in nginx:$NGINX_URL provender:$PROVENDER_URL; do
        record "doc.${doc//\//.}.${side%%:*}.bytes" \
            "$(curl -sSf --http1.1 --cacert "$CA" "${side#*:}/$HOST/bench/$doc" | wc -c)"
    done
done
check_big "$NGINX_URL/$HOST/bench/big/$BIG_ZIP"
check_big "$PROVENDER_URL/$HOST/bench/big/$BIG_ZIP"

# ---------------------------------------------------------------------------------------------
# Warm metadata: wrk against both, alternating which goes first.
# ---------------------------------------------------------------------------------------------
# CPU time (user + system, in clock ticks) used so far by the processes of one side.
cpu_ticks() { # nginx|provender
    if [ "$1" = nginx ]; then cpu_ticks_of $(tree_pids "$MIRROR_PID"); else cpu_ticks_of "$PROVENDER_PID"; fi
}
log "warm metadata: wrk -t2 -c{${CONNS[*]}} -d${DURATION}s --latency, $ROUNDS round(s)"
for base in "$NGINX_URL" "$PROVENDER_URL"; do # settle: connections, caches, CPU frequency
    timeout 30 wrk -t2 -c64 -d2s "$base/$HOST/bench/small/index.json" >/dev/null
done
for round in $(seq "$ROUNDS"); do
    for doc in version index; do
        path=small/index.json
        [ $doc = version ] && path=small/2.3.0.json
        for c in "${CONNS[@]}"; do
            order="nginx provender"
            [ $((round % 2)) = 0 ] && order="provender nginx"
            for side in $order; do
                base=$NGINX_URL
                [ $side = provender ] && base=$PROVENDER_URL
                ticks=$(cpu_ticks $side)
                read -r rps p50 p99 errors requests <<<"$(run_wrk "$side-$doc" "$c" "$base/$HOST/bench/$path")"
                cpu_us=$(calc "($(cpu_ticks $side) - $ticks) / $TICK_HZ * 1e6 / $requests")
                printf '  round %s %s.json c%s %s: %s req/s, p50 %s ms, p99 %s ms, %.1f CPU us/req, errors %s\n' \
                    "$round" $doc "$c" $side "$rps" "$p50" "$p99" "$cpu_us" "$errors" >&2
                record "meta.$doc.c$c.$side.cpu_us" "$cpu_us"
                record "meta.$doc.c$c.$side.rps" "$rps"
                record "meta.$doc.c$c.$side.p50" "$p50"
                record "meta.$doc.c$c.$side.p99" "$p99"
                record "meta.$doc.c$c.$side.errors" "$errors"
            done
        done
    done
done

# ---------------------------------------------------------------------------------------------
# Warm archives: curl, 1 and 4 parallel streams, aggregate throughput.
# ---------------------------------------------------------------------------------------------
log "warm archives: $BIG_ZIP ($((BIG_BYTES >> 20)) MiB), streams ${STREAMS[*]}, $REPS run(s) each"
for rep in $(seq "$REPS"); do
    for s in "${STREAMS[@]}"; do
        order="nginx provender"
        [ $((rep % 2)) = 0 ] && order="provender nginx"
        for side in $order; do
            base=$NGINX_URL
            [ $side = provender ] && base=$PROVENDER_URL
            ticks=$(cpu_ticks $side)
            mibps=$(parallel_download "$base/$HOST/bench/big/$BIG_ZIP" "$s" "$BIG_BYTES")
            cpu_s=$(calc "($(cpu_ticks $side) - $ticks) / $TICK_HZ / ($s * $BIG_BYTES / 2**30)")
            printf '  run %s, %s stream(s), %s: %.0f MiB/s, %.2f CPU s/GiB\n' "$rep" "$s" "$side" "$mibps" "$cpu_s" >&2
            record "dl.s$s.$side.mibps" "$mibps"
            record "dl.s$s.$side.cpu_s" "$cpu_s"
        done
    done
done

# ---------------------------------------------------------------------------------------------
# Memory: idle, and 100 concurrent downloads of the mid and big archives (peak RSS).
# ---------------------------------------------------------------------------------------------
record rss.warm "$(status_kib "$PROVENDER_PID" VmRSS)"
log "memory: $CLIENTS concurrent downloads from provender (mid, then big archive; $MEM_REPS time(s))"
for t in $(for rep in $(seq "$MEM_REPS"); do echo mid big; done); do
    zip=$MID_ZIP bytes=$MID_BYTES
    [ $t = big ] && zip=$BIG_ZIP bytes=$BIG_BYTES
    echo 5 >"/proc/$PROVENDER_PID/clear_refs" # resets VmHWM to the current RSS
    mibps=$(parallel_download "$PROVENDER_URL/$HOST/bench/$t/$zip" "$CLIENTS" "$bytes")
    hwm=$(status_kib "$PROVENDER_PID" VmHWM)
    printf '  %s: peak RSS %s KiB, %.0f MiB/s aggregate\n' "$t" "$hwm" "$mibps" >&2
    record "rss.dl.$t" "$hwm"
    record "dl100.$t.mibps" "$mibps"
done
log "memory: $CLIENTS concurrent downloads of the big archive from nginx"
NGINX_PIDS=("$MIRROR_PID" $(pgrep -P "$MIRROR_PID"))
for pid in "${NGINX_PIDS[@]}"; do echo 5 >"/proc/$pid/clear_refs"; done
parallel_download "$NGINX_URL/$HOST/bench/big/$BIG_ZIP" "$CLIENTS" "$BIG_BYTES" >/dev/null
total=0
for pid in "${NGINX_PIDS[@]}"; do total=$((total + $(status_kib "$pid" VmHWM))); done
record rss.nginx.dl.big "$total"

# ---------------------------------------------------------------------------------------------
# Cold miss: the big archive through a provender with an empty cache, against a direct download.
# ---------------------------------------------------------------------------------------------
COLD_URL=https://127.0.0.1:$COLD_PORT
# A provender with an empty cache on COLD_PORT, fetching from the origin at a port; sets STARTED.
start_cold() { # origin-port
    rm -rf "$WORK/cache-cold"
    provender_conf "$WORK/cold.toml" "$COLD_PORT" "$WORK/cache-cold" "$1"
    start_provender "$WORK/cold.toml" "$COLD_PORT" "$WORK/provender-cold.log"
}
cold_miss() { # name origin-port warm-metadata
    start_cold "$2"
    local pid=$STARTED
    if [ "$3" = yes ]; then
        # As the CLI does: the version list and version document first, then the archive.
        fetch "$COLD_URL/$HOST/bench/big/index.json"
        fetch "$COLD_URL/$HOST/bench/big/1.0.0.json"
    fi
    timed_download "cold.$1" "$COLD_URL/$HOST/bench/big/$BIG_ZIP" "$BIG_BYTES"
    wait_h1 "$COLD_URL" big 1.0.0
    if [ "$1" = provender ]; then record h1.provender_fill.s "$(h1_seconds "$COLD_URL")"; fi
    stop "$pid"
}
log "cold miss: $BIG_ZIP, $COLD_REPS run(s); provender with an empty cache on 127.0.0.1:$COLD_PORT"
for rep in $(seq "$COLD_REPS"); do
    timed_download cold.direct "$ORIGIN/files/bench/big/1.0.0/$BIG_ZIP" "$BIG_BYTES"
    cold_miss provender "$ORIGIN_PORT" yes
    timed_download cold.direct_limited "$LIMITED/files/bench/big/1.0.0/$BIG_ZIP" "$BIG_BYTES"
    cold_miss provender_limited "$LIMITED_PORT" yes
    if [ "$rep" = 1 ]; then cold_miss provender_allcold "$ORIGIN_PORT" no; fi
done

log "memory: $CLIENTS concurrent downloads of the big archive through a provender with an empty cache"
start_cold "$ORIGIN_PORT"
pid=$STARTED
fetch "$COLD_URL/$HOST/bench/big/1.0.0.json"
mibps=$(parallel_download "$COLD_URL/$HOST/bench/big/$BIG_ZIP" "$CLIENTS" "$BIG_BYTES")
wait_h1 "$COLD_URL" big 1.0.0
hwm=$(status_kib "$pid" VmHWM)
printf '  big, cold: peak RSS %s KiB, %.0f MiB/s aggregate\n' "$hwm" "$mibps" >&2
record rss.cold.big "$hwm"
record dl100.cold.mibps "$mibps"
stop "$pid"

# The h1 reference's provender side: `provender seed` into an empty cache (timed).
log "h1 reference: provender seed of the big provider into an empty cache, $TF_REPS run(s)"
for rep in $(seq "$TF_REPS"); do
    rm -rf "$WORK/cache-seed"
    provender_conf "$WORK/seed.toml" "$COLD_PORT" "$WORK/cache-seed" "$ORIGIN_PORT"
    t0=$(now)
    "$PROVENDER" seed --config "$WORK/seed.toml" --provider "$HOST/bench/big@1.0.0" \
        --platform linux_amd64 >>"$WORK/seed.log" 2>&1 || { cat "$WORK/seed.log" >&2; die "seed failed"; }
    record h1.provender_seed.s "$(elapsed "$t0" "$(now)")"
done
rm -rf "$WORK/cache-seed" "$WORK/cache-cold"

log "h1 reference: the same computation in Python (zlib + OpenSSL SHA-256), $TF_REPS run(s)"
PROVENDER_H1=$(curl -sSf --cacert "$CA" "$PROVENDER_URL/$HOST/bench/big/1.0.0.json" \
    | python3 -c 'import json,sys; print(next(h for h in json.load(sys.stdin)["archives"]["linux_amd64"]["hashes"] if h.startswith("h1:")))')
for rep in $(seq "$TF_REPS"); do
    read -r ref_h1 secs content <<<"$(python3 bench/h1_reference.py "$WORK/origin/files/bench/big/1.0.0/$BIG_ZIP")"
    [ "$ref_h1" = "$PROVENDER_H1" ] || die "h1 mismatch: provender $PROVENDER_H1, reference $ref_h1"
    record h1.python.s "$secs"
done
record size.big.content.mib "$(calc "$content / 2**20")"
# The floor under any h1 implementation: one SHA-256 pass over the content (OpenSSL, 1 MiB blocks).
sha_kb=$(openssl speed -seconds "$DURATION" -bytes 1048576 -evp sha256 2>/dev/null | awk 'END { print $2 }')
record h1.openssl_sha256 "$(calc "${sha_kb%k} * 1000 / 2**20")"

# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
log "done"
{
    echo "## Figures"
    echo
    echo "$(date -u +%Y-%m-%d), $(machine); \
$([ $QUICK = 1 ] && echo "bench/run.sh --quick" || echo "bench/run.sh") at provender $REVISION; \
$(tool_versions), $(tf "$WORK" version | head -1); load average $LOAD_START before the run."
    echo
    python3 bench/report.py table "$RESULTS"
} | tee "${OUT:-/dev/null}"
