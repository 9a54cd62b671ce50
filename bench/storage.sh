#!/usr/bin/env bash
# provender's cache in an object store against its cache on disk. Two provender instances run
# side by side from the same origin, one with `cache.backend = "disk"`, one with
# `cache.backend = "s3"` on a single-node Garage (a distributed S3-compatible store) on
# loopback, and every figure is taken for both in the same run, alternating which goes first,
# so the ratios mean something on a noisy machine. BENCHMARKS.md explains each figure.
#
#   bench/storage.sh            full run: 128 MiB archive, 10 s wrk runs, 3 rounds (~8 min)
#   bench/storage.sh --quick    smoke run: 24 MiB archive, 3 s wrk runs, 1 round (~1.5 min)
#
# Options:
#   --skip-build     use the existing target/release/provender (no cargo build)
#   --out FILE       also write the table of figures to FILE
#   --keep           keep the work directory (fixtures, configurations, logs, Garage's data)
#
# Needs Garage (`cargo install garage --locked`): $GARAGE_BIN, else `garage` on PATH, else
# ~/.cargo/bin/garage.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

source bench/lib.sh
bench_args "$@"

if [ $QUICK = 1 ]; then
    BIG_MIB=24 DURATION=3 ROUNDS=1 REPS=2 COLD_REPS=1 REPLICA_REPS=1
else
    BIG_MIB=128 DURATION=10 ROUNDS=3 REPS=5 COLD_REPS=5 REPLICA_REPS=3
fi
MID_MIB=1       # fixtures.py always builds the mid provider; not measured here
CONNS=(64 256)
STREAMS=(1 4)
CLIENTS=100     # concurrent downloads for the memory figures
BUCKET=provender
REGION=garage

bench_tools
GARAGE=${GARAGE_BIN:-$(command -v garage || true)}
[ -n "$GARAGE" ] || [ ! -x "$HOME/.cargo/bin/garage" ] || GARAGE=$HOME/.cargo/bin/garage
[ -n "$GARAGE" ] && [ -x "$GARAGE" ] \
    || die "this benchmark runs a real Garage and found none: install it with \`cargo install garage --locked\` (or set GARAGE_BIN)"
bench_workdir provender-storage
bench_machine
bench_build
bench_pki
bench_origin "$BIG_MIB" "$MID_MIB"
# DEAD_PORT: nothing listens there (an origin that refuses every connection).
read -r ORIGIN_PORT DEAD_PORT GARAGE_RPC GARAGE_S3 DISK_PORT S3_PORT COLD_PORT REPLICA_PORT TIER_PORT \
    <<<"$(free_ports 9)"
start_origin origin "$ORIGIN_PORT"
ORIGIN=https://127.0.0.1:$ORIGIN_PORT

# ---------------------------------------------------------------------------------------------
# Garage: one node, one bucket, one key (generated for the run), data in the work directory.
# ---------------------------------------------------------------------------------------------
GARAGE_DIR=$WORK/garage
GARAGE_KEY_ID=GK$(openssl rand -hex 12)
(umask 077 && openssl rand -hex 32 >"$WORK/s3-secret")
log "garage $("$GARAGE" --version | awk '{print $2}'): S3 API on 127.0.0.1:$GARAGE_S3, bucket $BUCKET"
mkdir -p "$GARAGE_DIR"
cat >"$GARAGE_DIR/garage.toml" <<EOF
metadata_dir = "$GARAGE_DIR/meta"
data_dir = "$GARAGE_DIR/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$GARAGE_RPC"
rpc_public_addr = "127.0.0.1:$GARAGE_RPC"
rpc_secret = "$(openssl rand -hex 32)"

[s3_api]
s3_region = "$REGION"
api_bind_addr = "127.0.0.1:$GARAGE_S3"
root_domain = ".s3.garage.localhost"
EOF
# --single-node assigns the layout; --default-bucket creates the bucket and the key and allows
# the key on it (what `garage layout assign/apply`, `bucket create`, `key create` and
# `bucket allow` would do).
GARAGE_CONFIG_FILE=$GARAGE_DIR/garage.toml GARAGE_DEFAULT_ACCESS_KEY=$GARAGE_KEY_ID \
    GARAGE_DEFAULT_SECRET_KEY=$(cat "$WORK/s3-secret") GARAGE_DEFAULT_BUCKET=$BUCKET RUST_LOG=warn \
    "$GARAGE" server --single-node --default-bucket </dev/null >>"$GARAGE_DIR/garage.log" 2>&1 &
GARAGE_PID=$!
PIDS+=("$GARAGE_PID")
wait_port "$GARAGE_S3" "$GARAGE_PID" || { cat "$GARAGE_DIR/garage.log" >&2; die "garage did not start"; }

# [cache] settings of each backend. index_ttl is raised so that no version list expires during
# the run: every metadata answer here comes from the cache, never from the origin.
disk_cache() { echo 'index_ttl = "1h"'; }
s3_cache() { # prefix
    cat <<EOF
index_ttl = "1h"
backend = "s3"

[cache.object_store]
bucket = "$BUCKET"
prefix = "$1"
region = "$REGION"
endpoint = "http://127.0.0.1:$GARAGE_S3"
path_style = true
allow_http = true
access_key_id = "$GARAGE_KEY_ID"
secret_access_key_file = "$WORK/s3-secret"
EOF
}
# Waits until /readyz answers 200 (with a bucket: it can be written and read).
wait_ready() { # base-url
    local i
    for i in $(seq 300); do
        [ "$(curl -s --cacert "$CA" -o /dev/null -w '%{http_code}' "$1/readyz")" = 200 ] && return 0
        sleep 0.1
    done
    die "$1 is not ready: $(curl -s --cacert "$CA" "$1/readyz")"
}
# Dies if a provender with an object-store backend keeps archives in its local directory.
check_no_local_archives() { # dir
    local found
    found=$(find "$1" -name '*.zip' | head -1)
    [ -z "$found" ] || die "an object-store instance keeps an archive on disk: $found"
}
# Waits until no archive download or commit is in progress (provender_fills_in_flight is 0):
# the archive is in the store, its record written.
wait_committed() { # base-url
    local i
    for i in $(seq 6000); do
        [ "$(metric "$1" provender_fills_in_flight)" = 0 ] && return 0
        sleep 0.01
    done
    die "$1: the fill did not finish"
}

# ---------------------------------------------------------------------------------------------
# The two instances under test, warmed.
# ---------------------------------------------------------------------------------------------
DISK_URL=https://127.0.0.1:$DISK_PORT
S3_URL=https://127.0.0.1:$S3_PORT
log "provender, disk backend, on 127.0.0.1:$DISK_PORT"
provender_conf "$WORK/disk.toml" "$DISK_PORT" "$WORK/cache-disk" "$ORIGIN_PORT" "$(disk_cache)"
start_provender "$WORK/disk.toml" "$DISK_PORT" "$WORK/provender-disk.log"
DISK_PID=$STARTED
log "provender, s3 backend (Garage, prefix \"warm\"), on 127.0.0.1:$S3_PORT"
provender_conf "$WORK/s3.toml" "$S3_PORT" "$WORK/local-s3" "$ORIGIN_PORT" "$(s3_cache warm)"
start_provender "$WORK/s3.toml" "$S3_PORT" "$WORK/provender-s3.log"
S3_PID=$STARTED
TIER_URL=https://127.0.0.1:$TIER_PORT
log "provender, s3 backend with a 1 GiB local tier (cache.local_max_size), on 127.0.0.1:$TIER_PORT"
provender_conf "$WORK/tier.toml" "$TIER_PORT" "$WORK/local-tier" "$ORIGIN_PORT" \
    "local_max_size = \"1 GiB\"
$(s3_cache warm)"
start_provender "$WORK/tier.toml" "$TIER_PORT" "$WORK/provender-tier.log"
TIER_PID=$STARTED
wait_ready "$S3_URL"
sleep 1
record rss.disk.idle "$(status_kib "$DISK_PID" VmRSS)"
record rss.s3.idle "$(status_kib "$S3_PID" VmRSS)"

url_of() { case $1 in disk) echo "$DISK_URL" ;; tier) echo "$TIER_URL" ;; *) echo "$S3_URL" ;; esac; }
pid_of() { case $1 in disk) echo "$DISK_PID" ;; tier) echo "$TIER_PID" ;; *) echo "$S3_PID" ;; esac; }
# Which side goes first in round N.
order() { if [ $(($1 % 2)) = 1 ]; then echo disk s3; else echo s3 disk; fi; }

log "warming both: every document and archive the benchmarks ask for"
warm_provender "$DISK_URL"
warm_provender "$S3_URL"
check_big "$DISK_URL/$HOST/bench/big/$BIG_ZIP"
check_big "$S3_URL/$HOST/bench/big/$BIG_ZIP"
check_no_local_archives "$WORK/local-s3"
# The tiered instance: its first download reads the bucket (the S3 instance filled it) and copies
# the archive to its tier; the next ones come from local disk.
check_big "$TIER_URL/$HOST/bench/big/$BIG_ZIP"
for _ in $(seq 600); do
    [ -n "$(find "$WORK/local-tier/local" -name "$BIG_ZIP" 2>/dev/null)" ] && break
    sleep 0.1
done
[ -n "$(find "$WORK/local-tier/local" -name "$BIG_ZIP")" ] || die "the tier did not keep $BIG_ZIP"
check_big "$TIER_URL/$HOST/bench/big/$BIG_ZIP"
[ "$(metric "$TIER_URL" 'provender_local_tier_requests_total{result="hit"}')" -ge 1 ] \
    || die "the tiered instance did not serve from its tier"
for doc in small/index.json small/2.3.0.json big/1.0.0.json; do
    cmp -s <(curl -sSf --http1.1 --cacert "$CA" "$DISK_URL/$HOST/bench/$doc") \
        <(curl -sSf --http1.1 --cacert "$CA" "$S3_URL/$HOST/bench/$doc") \
        || die "the two backends answer different $doc documents"
done
record garage.data.mib "$(du -sk "$GARAGE_DIR/data" | awk '{ print $1 / 1024 }')"

# ---------------------------------------------------------------------------------------------
# Warm metadata: wrk against both, alternating which goes first. Garage's CPU time is taken
# too: with metadata in the in-memory LRU it should be idle.
# ---------------------------------------------------------------------------------------------
log "warm metadata: wrk -t2 -c{${CONNS[*]}} -d${DURATION}s --latency, $ROUNDS round(s)"
for side in disk s3; do # settle: connections, caches, CPU frequency
    timeout 30 wrk -t2 -c64 -d2s "$(url_of $side)/$HOST/bench/small/index.json" >/dev/null
done
for round in $(seq "$ROUNDS"); do
    for doc in version index; do
        path=small/index.json
        [ $doc = version ] && path=small/2.3.0.json
        for c in "${CONNS[@]}"; do
            for side in $(order "$round"); do
                pid=$(pid_of $side)
                ticks=$(cpu_ticks_of "$pid") gticks=$(cpu_ticks_of "$GARAGE_PID")
                read -r rps p50 p99 errors requests <<<"$(run_wrk "$side-$doc" "$c" "$(url_of $side)/$HOST/bench/$path")"
                cpu_us=$(calc "($(cpu_ticks_of "$pid") - $ticks) / $TICK_HZ * 1e6 / $requests")
                garage_us=$(calc "($(cpu_ticks_of "$GARAGE_PID") - $gticks) / $TICK_HZ * 1e6 / $requests")
                printf '  round %s %s.json c%s %s: %s req/s, p50 %s ms, p99 %s ms, %.1f CPU us/req (garage %.2f), socket errors %s\n' \
                    "$round" $doc "$c" $side "$rps" "$p50" "$p99" "$cpu_us" "$garage_us" "$errors" >&2
                record "meta.$doc.c$c.$side.rps" "$rps"
                record "meta.$doc.c$c.$side.p50" "$p50"
                record "meta.$doc.c$c.$side.p99" "$p99"
                record "meta.$doc.c$c.$side.cpu_us" "$cpu_us"
                record "meta.$doc.c$c.$side.garage_us" "$garage_us"
                record "meta.$doc.c$c.$side.errors" "$errors"
            done
        done
    done
done

# ---------------------------------------------------------------------------------------------
# Warm archives: curl, 1 and 4 parallel streams, aggregate throughput; then one download each
# for the time to first byte.
# ---------------------------------------------------------------------------------------------
# The reference for what the store itself delivers: the same object straight from Garage, by
# the pre-signed URL (plain HTTP, valid 15 minutes) that a provender with
# cache.redirect_downloads = true answers with; taken from a short-lived instance on the bucket.
provender_conf "$WORK/redirect.toml" "$REPLICA_PORT" "$WORK/local-redirect" "$DEAD_PORT" \
    "redirect_downloads = true
$(s3_cache warm)"
start_provender "$WORK/redirect.toml" "$REPLICA_PORT" "$WORK/provender-redirect.log"
read -r code STORE_URL <<<"$(curl -sS --http1.1 --cacert "$CA" -o /dev/null -w '%{http_code} %{redirect_url}' \
    "https://127.0.0.1:$REPLICA_PORT/$HOST/bench/big/$BIG_ZIP")"
[ "$code" = 302 ] && [ -n "$STORE_URL" ] || die "no redirect to the store (status $code)"
stop "$STARTED"
check_big "$STORE_URL"
# A warm download's URL and the processes whose CPU time it costs.
archive_url() {
    case $1 in
        store) echo "$STORE_URL" ;;
        *) echo "$(url_of "$1")/$HOST/bench/big/$BIG_ZIP" ;;
    esac
}
log "warm archives: $BIG_ZIP ($((BIG_BYTES >> 20)) MiB), streams ${STREAMS[*]}, $REPS run(s) each; disk, s3, and the store alone"
for rep in $(seq "$REPS"); do
    sides="disk s3 tier store"
    [ $((rep % 2)) = 1 ] || sides="store tier s3 disk"
    for s in "${STREAMS[@]}"; do
        for side in $sides; do
            pid=$GARAGE_PID
            [ $side = store ] || pid=$(pid_of $side)
            ticks=$(cpu_ticks_of "$pid") gticks=$(cpu_ticks_of "$GARAGE_PID")
            mibps=$(parallel_download "$(archive_url $side)" "$s" "$BIG_BYTES")
            gib=$(calc "$s * $BIG_BYTES / 2**30")
            cpu_s=$(calc "($(cpu_ticks_of "$pid") - $ticks) / $TICK_HZ / $gib")
            garage_s=$(calc "($(cpu_ticks_of "$GARAGE_PID") - $gticks) / $TICK_HZ / $gib")
            printf '  run %s, %s stream(s), %s: %.0f MiB/s, %.2f CPU s/GiB (garage %.2f)\n' \
                "$rep" "$s" $side "$mibps" "$cpu_s" "$garage_s" >&2
            record "dl.s$s.$side.mibps" "$mibps"
            [ $side = store ] || record "dl.s$s.$side.cpu_s" "$cpu_s"
            record "dl.s$s.$side.garage_s" "$garage_s"
        done
    done
    for side in $sides; do
        timed_download "warm.$side" "$(archive_url $side)" "$BIG_BYTES"
    done
done

# ---------------------------------------------------------------------------------------------
# Memory: idle after the warm benchmarks, and the peak while CLIENTS download the archive at once.
# ---------------------------------------------------------------------------------------------
log "memory: $CLIENTS concurrent downloads of the archive from each"
for side in disk s3; do
    pid=$(pid_of $side)
    record "rss.$side.warm" "$(status_kib "$pid" VmRSS)"
    echo 5 >"/proc/$pid/clear_refs" # resets VmHWM to the current RSS
    mibps=$(parallel_download "$(url_of $side)/$HOST/bench/big/$BIG_ZIP" "$CLIENTS" "$BIG_BYTES")
    hwm=$(status_kib "$pid" VmHWM)
    printf '  %s: peak RSS %s KiB, %.0f MiB/s aggregate\n' $side "$hwm" "$mibps" >&2
    record "rss.$side.dl" "$hwm"
    record "dl100.$side.mibps" "$mibps"
done
record rss.garage "$(status_kib "$GARAGE_PID" VmHWM)"

# ---------------------------------------------------------------------------------------------
# A fresh replica: a new process with an empty local directory on the same bucket and prefix,
# and an origin that refuses every connection, so whatever it serves comes from the bucket.
# ---------------------------------------------------------------------------------------------
REPLICA_URL=https://127.0.0.1:$REPLICA_PORT
# One request on a new connection; prints its total time after checking status 200.
one_request() { # url
    local out code total
    out=$(curl -sS --http1.1 --cacert "$CA" -o /dev/null -w '%{http_code} %{time_total}' "$1")
    read -r code total <<<"$out"
    [ "$code" = 200 ] || die "$1 answered $code"
    echo "$total"
}
log "fresh replica on 127.0.0.1:$REPLICA_PORT (same bucket, empty local directory, origin unreachable), $REPLICA_REPS time(s)"
for rep in $(seq "$REPLICA_REPS"); do
    rm -rf "$WORK/local-replica"
    provender_conf "$WORK/replica.toml" "$REPLICA_PORT" "$WORK/local-replica" "$DEAD_PORT" "$(s3_cache warm)"
    start_provender "$WORK/replica.toml" "$REPLICA_PORT" "$WORK/provender-replica.log"
    pid=$STARTED
    wait_ready "$REPLICA_URL"
    # As the CLI asks: the version list, the version document, then the archive. The same
    # requests to the warm instances are the reference (each on a new connection too).
    for side in disk s3 replica; do
        base=$REPLICA_URL
        [ $side = replica ] || base=$(url_of $side)
        record "first.index.$side" "$(one_request "$base/$HOST/bench/big/index.json")"
        record "first.version.$side" "$(one_request "$base/$HOST/bench/big/1.0.0.json")"
    done
    timed_download replica.first "$REPLICA_URL/$HOST/bench/big/$BIG_ZIP" "$BIG_BYTES"
    timed_download replica.second "$REPLICA_URL/$HOST/bench/big/$BIG_ZIP" "$BIG_BYTES"
    record rss.replica "$(status_kib "$pid" VmRSS)"
    check_big "$REPLICA_URL/$HOST/bench/big/$BIG_ZIP"
    check_no_local_archives "$WORK/local-replica"
    stop "$pid"
done

# ---------------------------------------------------------------------------------------------
# Cold miss: the archive through a provender with an empty cache (disk, or an empty prefix of
# the bucket), against a direct download from the origin.
# ---------------------------------------------------------------------------------------------
COLD_URL=https://127.0.0.1:$COLD_PORT
cold_miss() { # side rep
    local dir=$WORK/cold-$1 cache pid t0 ticks gticks
    rm -rf "$dir"
    if [ "$1" = disk ]; then cache=$(disk_cache); else cache=$(s3_cache "cold-$2"); fi
    provender_conf "$WORK/cold-$1.toml" "$COLD_PORT" "$dir" "$ORIGIN_PORT" "$cache"
    start_provender "$WORK/cold-$1.toml" "$COLD_PORT" "$WORK/provender-cold-$1.log"
    pid=$STARTED
    wait_ready "$COLD_URL"
    # As the CLI does: the version list and version document first, then the archive.
    fetch "$COLD_URL/$HOST/bench/big/index.json"
    fetch "$COLD_URL/$HOST/bench/big/1.0.0.json"
    t0=$(now)
    timed_download "cold.$1" "$COLD_URL/$HOST/bench/big/$BIG_ZIP" "$BIG_BYTES"
    ticks=$(cpu_ticks_of "$pid") gticks=$(cpu_ticks_of "$GARAGE_PID")
    wait_committed "$COLD_URL"
    record "cold.$1.commit" "$(elapsed "$t0" "$(now)")"
    # CPU time spent after the client's last byte, until stored.
    record "cold.$1.after_cpu" "$(calc "($(cpu_ticks_of "$pid") - $ticks) / $TICK_HZ")"
    record "cold.$1.after_garage_cpu" "$(calc "($(cpu_ticks_of "$GARAGE_PID") - $gticks) / $TICK_HZ")"
    record "cold.$1.h1" "$(h1_seconds "$COLD_URL")"
    wait_h1 "$COLD_URL" big 1.0.0
    check_big "$COLD_URL/$HOST/bench/big/$BIG_ZIP" # now from the store
    [ "$1" = disk ] || check_no_local_archives "$dir"
    stop "$pid"
}
log "cold miss: $BIG_ZIP, $COLD_REPS run(s); provender with an empty cache on 127.0.0.1:$COLD_PORT"
for rep in $(seq "$COLD_REPS"); do
    timed_download cold.direct "$ORIGIN/files/bench/big/1.0.0/$BIG_ZIP" "$BIG_BYTES"
    for side in $(order "$rep"); do
        cold_miss $side "$rep"
    done
done

# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
log "done"
{
    echo "## Figures: object store (Garage) against disk"
    echo
    echo "$(date -u +%Y-%m-%d), $(machine); \
$([ $QUICK = 1 ] && echo "bench/storage.sh --quick" || echo "bench/storage.sh") at provender $REVISION; \
garage $("$GARAGE" --version | awk '{print $2}'), $(tool_versions); load average $LOAD_START before the run."
    echo
    python3 bench/report.py storage "$RESULTS"
} | tee "${OUT:-/dev/null}"
