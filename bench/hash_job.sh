#!/usr/bin/env bash
# What the complete-hashes job costs, per version with many platforms: bytes fetched from the
# origin and bytes kept in the cache, with the job off, on (the default: hash and drop), and on
# with `complete_hashes.keep_archives`. One version of a provider with 12 platforms (like
# hashicorp/aws) is requested as `terraform init` does (its <version>.json and the archive of
# one platform); then each provender's metrics and cache directory are read. The three run side
# by side from one origin, in the same run. BENCHMARKS.md explains the figures.
#
#   bench/hash_job.sh            full run: 12 platforms x 32 MiB (~1 min)
#   bench/hash_job.sh --quick    smoke run: 12 platforms x 4 MiB
#
# Options:
#   --skip-build     use the existing target/release/provender (no cargo build)
#   --out FILE       also write the table of figures to FILE
#   --keep           keep the work directory (fixtures, caches, logs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

source bench/lib.sh
bench_args "$@"

if [ $QUICK = 1 ]; then WIDE_MIB=4; else WIDE_MIB=32; fi
PLATFORMS=12
ASKED=linux_amd64

bench_tools
bench_workdir provender-hash-job
bench_machine
bench_build
bench_pki

log "origin fixtures: bench/wide 1.0.0 on $PLATFORMS platforms, $WIDE_MIB MiB each"
mkdir -m 700 "$WORK/gnupg"
python3 bench/fixtures.py --out "$WORK/origin" --gnupghome "$WORK/gnupg" \
    --big-mib 1 --mid-mib 1 --wide-mib "$WIDE_MIB"
GNUPGHOME=$WORK/gnupg gpgconf --kill all 2>/dev/null || true
ZIP=terraform-provider-wide_1.0.0_${ASKED}.zip
ZIP_BYTES=$(stat -c %s "$WORK/origin/files/bench/wide/1.0.0/$ZIP")
ALL_BYTES=$(cat "$WORK"/origin/files/bench/wide/1.0.0/*.zip | wc -c)

read -r ORIGIN_PORT OFF_PORT ON_PORT KEEP_PORT <<<"$(free_ports 4)"
start_origin origin "$ORIGIN_PORT"

MODES=(off on keep)
declare -A PORT=([off]=$OFF_PORT [on]=$ON_PORT [keep]=$KEEP_PORT)
declare -A JOB=(
    [off]=$'[complete_hashes]\nenabled = false'
    [on]=$'[complete_hashes]\nmax_bandwidth = "0"'
    [keep]=$'[complete_hashes]\nmax_bandwidth = "0"\nkeep_archives = true'
)
for mode in "${MODES[@]}"; do
    provender_conf "$WORK/$mode.toml" "${PORT[$mode]}" "$WORK/cache-$mode" "$ORIGIN_PORT" \
        "${JOB[$mode]}"
    start_provender "$WORK/$mode.toml" "${PORT[$mode]}" "$WORK/$mode.log"
done

# As terraform init asks: the version document, then one platform's archive (checked whole).
for mode in "${MODES[@]}"; do
    base=https://127.0.0.1:${PORT[$mode]}
    curl -sSf --cacert "$CA" -o /dev/null "$base/$HOST/bench/wide/1.0.0.json"
    got=$(curl -sS --cacert "$CA" -o "$WORK/got.zip" -w '%{http_code} %{size_download}' \
        "$base/$HOST/bench/wide/$ZIP")
    [ "$got" = "200 $ZIP_BYTES" ] || die "$mode: the archive answered $got, not 200 $ZIP_BYTES"
done

# The job's work is done when <version>.json lists an h1: for every platform.
for mode in on keep; do
    base=https://127.0.0.1:${PORT[$mode]}
    for _ in $(seq 600); do
        n=$(curl -sSf --cacert "$CA" "$base/$HOST/bench/wide/1.0.0.json" \
            | python3 -c 'import json,sys; print(sum(1 for a in json.load(sys.stdin)["archives"].values() if any(h.startswith("h1:") for h in a["hashes"])))')
        [ "$n" = "$PLATFORMS" ] && break
        sleep 0.1
    done
    [ "$n" = "$PLATFORMS" ] || die "$mode: only $n of $PLATFORMS platforms have an h1:"
done
sleep 1 # the last commit's bookkeeping

for mode in "${MODES[@]}"; do
    base=https://127.0.0.1:${PORT[$mode]}
    fetched=$(metric "$base" provender_upstream_bytes_total)
    stored=$(du -sb "$WORK/cache-$mode/archives" 2>/dev/null | cut -f1)
    h1s=$(curl -sSf --cacert "$CA" "$base/$HOST/bench/wide/1.0.0.json" \
        | python3 -c 'import json,sys; print(sum(1 for a in json.load(sys.stdin)["archives"].values() if any(h.startswith("h1:") for h in a["hashes"])))')
    record "$mode.fetched.mib" "$(calc "${fetched%.*} / 2**20")"
    record "$mode.stored.mib" "$(calc "${stored:-0} / 2**20")"
    record "$mode.h1s" "$h1s"
done

{
    echo "One version, $PLATFORMS platforms x $WIDE_MIB MiB ($(calc "round($ALL_BYTES / 2**20, 1)") MiB in all); a client downloads $ASKED."
    printf '%-34s %14s %14s %16s\n' "" "fetched (MiB)" "stored (MiB)" "platforms w/ h1:"
    for mode in "${MODES[@]}"; do
        case $mode in
            off) name="job off" ;;
            on) name="job on (default: hash and drop)" ;;
            keep) name="job on, keep_archives = true" ;;
        esac
        printf '%-34s %14.1f %14.1f %16s\n' "$name" \
            "$(awk -v k="$mode.fetched.mib" '$1 == k { print $2 }' "$RESULTS")" \
            "$(awk -v k="$mode.stored.mib" '$1 == k { print $2 }' "$RESULTS")" \
            "$(awk -v k="$mode.h1s" '$1 == k { print $2 }' "$RESULTS")/$PLATFORMS"
    done
} | tee "${OUT:-/dev/null}"
