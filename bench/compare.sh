#!/usr/bin/env bash
# The request path's guard: two builds of provender (before and after a change) side by side with
# nginx serving the same files, in one run, and the ratios that say whether a request still costs
# no more than nginx's. A change to the request path records its output in BENCHMARKS.md.
#
#   bench/compare.sh BEFORE AFTER            full run: 128 MiB archive, 10 s wrk runs, 3 rounds
#   bench/compare.sh --quick BEFORE AFTER    smoke run: 24 MiB archive, 3 s wrk runs, 1 round
#
# BEFORE and AFTER are each a provender binary or a git revision (checked out in the work
# directory and built with `cargo build --release` into target/compare/, which the first such
# build fills with every dependency); the working tree's build is the usual AFTER:
# `cargo build --release && bench/compare.sh origin/main target/release/provender`.
#
# Figures, each for nginx, BEFORE and AFTER:
#   - warm metadata: CPU time of the server's processes per request, `<version>.json` and
#     `index.json`, wrk at 64 and 256 connections (HTTP/1.1 keep-alive over TLS 1.3);
#   - warm archive: aggregate MiB/s and CPU s/GiB, 4 downloads on 4 connections (HTTP/1.1 and
#     HTTP/2) and 4 streams multiplexed on one HTTP/2 connection;
#   - cold miss: the archive through an empty cache against a direct download from the same
#     unthrottled loopback origin (total time and time to first byte).
# Every answer is checked (status and size, no non-2xx under wrk). CI never runs this: a ratio is
# a measurement, not a test.
#
# ROUNDS, if set, is how many rounds of the metadata figures to take (3; 1 with --quick).
# BEFORE_ENV and AFTER_ENV, if set, are environment assignments (`NAME=value ...`) for that side's
# server: the same build twice, e.g. `AFTER_ENV=TOKIO_WORKER_THREADS=1 bench/compare.sh B B`.
# BEFORE_CONFIG and AFTER_CONFIG, if set, are files of TOML tables appended to that side's
# configuration (e.g. a `[policy]` with a thousand rules: bench/policy_rules.sh writes one).
#
# Options:
#   --out FILE   also write the table of figures to FILE
#   --keep       keep the work directory (fixtures, configs, logs) and print its path
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

source bench/lib.sh

SIDES=()
bench_option() {
    case $1 in
        -*) return 1 ;;
        *) SIDES+=("$1") ;;
    esac
}
bench_args "$@"
[ ${#SIDES[@]} = 2 ] || die "give two builds: BEFORE AFTER (a binary or a git revision; see --help)"

# ROUNDS (of the metadata figures) may be given in the environment.
if [ $QUICK = 1 ]; then
    BIG_MIB=24 DURATION=3 ROUNDS=${ROUNDS:-1} REPS=2 COLD_REPS=2
else
    BIG_MIB=128 DURATION=10 ROUNDS=${ROUNDS:-3} REPS=5 COLD_REPS=5
fi
MID_MIB=1
CONNS=(64 256)
TERRAFORM=${TERRAFORM:-/usr/local/bin/terraform}

bench_tools
[ -x "$TERRAFORM" ] || die "the static mirror nginx serves is written by terraform at $TERRAFORM"
bench_workdir provender-compare
bench_machine

# A binary as given, or a git revision built into the work directory; prints the binary's path.
build_side() { # name binary-or-revision
    if [ -x "$2" ] && [ -f "$2" ]; then
        cp "$2" "$WORK/provender-$1"
    else
        local rev src
        rev=$(git rev-parse --verify --quiet "$2^{commit}") || die "$2 is neither a binary nor a git revision"
        src=$WORK/src-$1
        log "$1: building $2 ($(git rev-parse --short "$rev"))"
        git worktree add --quiet --detach "$src" "$rev"
        # A target directory of its own (the first build there builds every dependency), so
        # that the checkout's own target/release/provender, perhaps the other side, stays.
        if ! CARGO_TARGET_DIR=$ROOT/target/compare cargo build --release --locked \
            --manifest-path "$src/Cargo.toml" >&2; then
            git worktree remove --force "$src"
            die "building $2 failed"
        fi
        cp "$ROOT/target/compare/release/provender" "$WORK/provender-$1"
        git worktree remove --force "$src"
    fi
    echo "$WORK/provender-$1"
}
BEFORE_BIN=$(build_side before "${SIDES[0]}")
AFTER_BIN=$(build_side after "${SIDES[1]}")
BEFORE_ENV=${BEFORE_ENV:-} AFTER_ENV=${AFTER_ENV:-}
BEFORE_CONFIG=${BEFORE_CONFIG:-} AFTER_CONFIG=${AFTER_CONFIG:-}
REVISION="before ${SIDES[0]}${BEFORE_ENV:+ with $BEFORE_ENV}${BEFORE_CONFIG:+ and $(basename "$BEFORE_CONFIG")}, after ${SIDES[1]}${AFTER_ENV:+ with $AFTER_ENV}${AFTER_CONFIG:+ and $(basename "$AFTER_CONFIG")}"
# The TOML appended to a side's configuration (BEFORE_CONFIG, AFTER_CONFIG).
side_config() { # before|after
    local file=$BEFORE_CONFIG
    [ "$1" = after ] && file=$AFTER_CONFIG
    if [ -n "$file" ]; then cat "$file"; fi
}
# Starts a side's server (start_provender's arguments after the side) with that side's
# environment assignments; sets STARTED.
start_side() { # before|after config port log
    local side=$1 kv assignments
    shift
    assignments=$BEFORE_ENV
    [ "$side" = after ] && assignments=$AFTER_ENV
    for kv in $assignments; do export "${kv?}"; done
    PROVENDER=$BEFORE_BIN
    [ "$side" = after ] && PROVENDER=$AFTER_BIN
    start_provender "$@"
    for kv in $assignments; do unset "${kv%%=*}"; done
}

bench_pki
bench_origin "$BIG_MIB" "$MID_MIB"
read -r ORIGIN_PORT NGINX_PORT BEFORE_PORT AFTER_PORT COLD_PORT <<<"$(free_ports 5)"
start_origin origin "$ORIGIN_PORT"
ORIGIN=https://127.0.0.1:$ORIGIN_PORT

# The static mirror: what `terraform providers mirror` writes for the small provider, with the
# origin's big archive linked in at the place the same command would write it.
terraform_home "$ORIGIN"
MIRROR=$WORK/mirror
log "static mirror: terraform providers mirror of every version of the small provider"
for v in "${SMALL_VERSIONS[@]}"; do
    tf_config "$WORK/tf-$v" small "$v"
    tf "$WORK/tf-$v" providers mirror -platform=darwin_amd64 -platform=darwin_arm64 \
        -platform=linux_amd64 -platform=linux_arm64 -platform=windows_amd64 "$MIRROR" >/dev/null
done
mkdir -p "$MIRROR/$HOST/bench/big"
ln "$WORK/origin/files/bench/big/1.0.0/$BIG_ZIP" "$MIRROR/$HOST/bench/big/$BIG_ZIP"
nginx_conf mirror "$NGINX_PORT" "$MIRROR" auto "" "ssl http2"
start_nginx mirror "$NGINX_PORT"
NGINX_PID=$STARTED

declare -A URL PID
URL[nginx]=https://127.0.0.1:$NGINX_PORT
PID[nginx]=$NGINX_PID
for side in before after; do
    port=$BEFORE_PORT
    [ $side = after ] && port=$AFTER_PORT
    log "$side: provender on 127.0.0.1:$port"
    provender_conf "$WORK/$side.toml" "$port" "$WORK/cache-$side" "$ORIGIN_PORT" "$(side_config $side)"
    start_side $side "$WORK/$side.toml" "$port" "$WORK/$side.log"
    PID[$side]=$STARTED
    URL[$side]=https://127.0.0.1:$port
    for v in "${SMALL_VERSIONS[@]}"; do fetch "${URL[$side]}/$HOST/bench/small/$v.json"; done
    fetch "${URL[$side]}/$HOST/bench/small/index.json"
    fetch "${URL[$side]}/$HOST/bench/big/1.0.0.json"
    fetch "${URL[$side]}/$HOST/bench/big/$BIG_ZIP"
    wait_h1 "${URL[$side]}" big 1.0.0
done
ALL=(nginx before after)
for side in "${ALL[@]}"; do
    check_big "${URL[$side]}/$HOST/bench/big/$BIG_ZIP"
    [ "$(curl -sS --http2 --cacert "$CA" -o /dev/null -w '%{http_version}' "${URL[$side]}/$HOST/bench/small/index.json")" = 2 ] \
        || die "$side does not answer over HTTP/2"
    for doc in small/index.json small/2.3.0.json; do
        record "bytes.${doc//\//.}.$side" "$(curl -sSf --cacert "$CA" "${URL[$side]}/$HOST/bench/$doc" | wc -c)"
    done
done

cpu_ticks() { # side
    if [ "$1" = nginx ]; then cpu_ticks_of $(tree_pids "$NGINX_PID"); else cpu_ticks_of "${PID[$1]}"; fi
}
# The sides in an order that rotates with the round, so none always goes first.
rotated() { # round
    local i n=${#ALL[@]}
    for i in $(seq 0 $((n - 1))); do echo "${ALL[$(((i + $1) % n))]}"; done
}

log "warm metadata: wrk -t2 -c{${CONNS[*]}} -d${DURATION}s, $ROUNDS round(s)"
for side in "${ALL[@]}"; do # settle: connections, caches, CPU frequency
    timeout 30 wrk -t2 -c64 -d2s "${URL[$side]}/$HOST/bench/small/index.json" >/dev/null
done
for round in $(seq "$ROUNDS"); do
    for doc in version index; do
        path=small/index.json
        [ $doc = version ] && path=small/2.3.0.json
        for c in "${CONNS[@]}"; do
            for side in $(rotated "$round"); do
                ticks=$(cpu_ticks "$side")
                read -r rps _ _ _ requests <<<"$(run_wrk "$side-$doc" "$c" "${URL[$side]}/$HOST/bench/$path")"
                cpu_us=$(calc "($(cpu_ticks "$side") - $ticks) / $TICK_HZ * 1e6 / $requests")
                printf '  round %s %s.json c%s %s: %s req/s, %.1f CPU us/req\n' \
                    "$round" $doc "$c" "$side" "$rps" "$cpu_us" >&2
                record "meta.$doc.c$c.$side.cpu_us" "$cpu_us"
                record "meta.$doc.c$c.$side.rps" "$rps"
            done
        done
    done
done

log "warm archive: $BIG_ZIP ($((BIG_BYTES >> 20)) MiB), $REPS run(s) of each figure"
for rep in $(seq "$REPS"); do
    for figure in h1 h2 mux; do
        for side in $(rotated "$rep"); do
            url=${URL[$side]}/$HOST/bench/big/$BIG_ZIP
            ticks=$(cpu_ticks "$side")
            case $figure in
                h1) mibps=$(parallel_download "$url" 4 "$BIG_BYTES" --http1.1) ;;
                h2) mibps=$(parallel_download "$url" 4 "$BIG_BYTES" --http2) ;;
                mux) mibps=$(multiplexed_download "$url" 4 "$BIG_BYTES") ;;
            esac
            cpu_s=$(calc "($(cpu_ticks "$side") - $ticks) / $TICK_HZ / (4 * $BIG_BYTES / 2**30)")
            printf '  run %s, %s x4, %s: %.0f MiB/s, %.2f CPU s/GiB\n' "$rep" $figure "$side" "$mibps" "$cpu_s" >&2
            record "archive.$figure.$side.mibps" "$mibps"
            record "archive.$figure.$side.cpu_s" "$cpu_s"
        done
    done
done

log "cold miss: $BIG_ZIP through an empty cache, $COLD_REPS run(s), against a direct download"
for rep in $(seq "$COLD_REPS"); do
    timed_download cold.direct "$ORIGIN/files/bench/big/1.0.0/$BIG_ZIP" "$BIG_BYTES"
    for side in before after; do
        rm -rf "$WORK/cache-cold"
        provender_conf "$WORK/cold.toml" "$COLD_PORT" "$WORK/cache-cold" "$ORIGIN_PORT" "$(side_config $side)"
        start_side $side "$WORK/cold.toml" "$COLD_PORT" "$WORK/cold-$side.log"
        pid=$STARTED
        # As the CLI does: the version list and version document first, then the archive.
        fetch "https://127.0.0.1:$COLD_PORT/$HOST/bench/big/index.json"
        fetch "https://127.0.0.1:$COLD_PORT/$HOST/bench/big/1.0.0.json"
        ticks=$(cpu_ticks_of "$pid")
        timed_download "cold.$side" "https://127.0.0.1:$COLD_PORT/$HOST/bench/big/$BIG_ZIP" "$BIG_BYTES"
        wait_h1 "https://127.0.0.1:$COLD_PORT" big 1.0.0
        record "cold.$side.cpu_s" "$(calc "($(cpu_ticks_of "$pid") - $ticks) / $TICK_HZ")"
        stop "$pid"
    done
done

{
    echo "$(date -u +%Y-%m-%d), $(machine); bench/compare.sh$([ $QUICK = 1 ] && echo " --quick") \
${SIDES[*]} ($REVISION); $(tool_versions); load average $LOAD_START before the run."
    echo
    python3 bench/report.py compare "$RESULTS"
} | tee ${OUT:+"$OUT"}
