#!/usr/bin/env bash
# CLI release zips against provider archives: the same bytes (one large zip) served as a terraform
# release (`releases/terraform/<v>/...`) and as a provider archive, side by side with nginx serving
# the file itself. A cold miss (fresh cache, the zip streamed through while it is fetched and
# checked against its signed SHA256SUMS) and warm downloads (1 and 4 parallel, HTTP/1.1), every
# answer's status and size checked. The release's SHA256SUMS is signed with the throw-away bench
# key, which the configuration pins in place of HashiCorp's; on a cold miss it is fetched (and
# the provider's version document) before the timed download.
#
#   bench/releases.sh            128 MiB zip, 5 runs of each figure (~2 min)
#   bench/releases.sh --quick    24 MiB zip, 2 runs (~1 min)
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

if [ $QUICK = 1 ]; then BIG_MIB=24 REPS=2; else BIG_MIB=128 REPS=5; fi

bench_tools
bench_workdir provender-releases
bench_machine
bench_build
bench_pki
bench_origin "$BIG_MIB" 1

# The provider's large archive, published again as terraform 9.9.9 for linux_amd64 in
# HashiCorp's layout, its SHA256SUMS signed with the bench key.
VERSION=9.9.9
RELEASE_ZIP=terraform_${VERSION}_linux_amd64.zip
SUMS=terraform_${VERSION}_SHA256SUMS
release_dir=$WORK/origin/release/terraform/$VERSION
mkdir -p "$release_dir"
cp "$WORK/origin/files/bench/big/1.0.0/$BIG_ZIP" "$release_dir/$RELEASE_ZIP"
echo "$BIG_SHA256  $RELEASE_ZIP" >"$release_dir/$SUMS"
GNUPGHOME=$WORK/gnupg gpg --batch --yes --no-tty --detach-sign --digest-algo SHA256 \
    -o "$release_dir/$SUMS.sig" "$release_dir/$SUMS" 2>/dev/null
GNUPGHOME=$WORK/gnupg gpg --batch --armor --export >"$WORK/release-key.asc"
GNUPGHOME=$WORK/gnupg gpgconf --kill all 2>/dev/null || true

read -r ORIGIN_PORT NGINX_PORT PROVENDER_PORT <<<"$(free_ports 3)"
start_origin origin "$ORIGIN_PORT"
# nginx serves the same file as the mirror would, with as many workers as provender has cores.
nginx_conf mirror "$NGINX_PORT" "$release_dir" auto ""
start_nginx mirror "$NGINX_PORT"
NGINX_URL=https://127.0.0.1:$NGINX_PORT/$RELEASE_ZIP

PROVENDER_URL=https://127.0.0.1:$PROVENDER_PORT
RELEASE_URL=$PROVENDER_URL/releases/terraform/$VERSION/$RELEASE_ZIP
ARCHIVE_URL=$PROVENDER_URL/$HOST/bench/big/$BIG_ZIP
# A fresh provender on a fresh cache; sets PROVENDER_PID.
fresh_provender() { # name
    provender_conf "$WORK/$1.toml" "$PROVENDER_PORT" "$WORK/$1-cache" "$ORIGIN_PORT" "
[releases]
enabled = true
hashicorp_url = \"https://$HOST/release\"
hashicorp_key_file = \"$WORK/release-key.asc\"

# Off, so that no background download of the provider archive runs beside a timed one.
[complete_hashes]
enabled = false"
    start_provender "$WORK/$1.toml" "$PROVENDER_PORT" "$WORK/$1.log"
    PROVENDER_PID=$STARTED
}

log "cold miss: one client, fresh cache each run; $REPS run(s)"
for rep in $(seq "$REPS"); do
    fresh_provender "cold-$rep"
    # Both sides' metadata first (the version document; the release's signed SHA256SUMS), so
    # that each timing is the zip's alone.
    fetch "$PROVENDER_URL/$HOST/bench/big/1.0.0.json"
    fetch "$PROVENDER_URL/releases/terraform/$VERSION/$SUMS"
    order="release archive"
    [ $((rep % 2)) = 0 ] && order="archive release"
    for side in $order; do
        url=$RELEASE_URL
        [ $side = archive ] && url=$ARCHIVE_URL
        timed_download "cold.$side" "$url" "$BIG_BYTES"
    done
    timed_download cold.origin "https://127.0.0.1:$ORIGIN_PORT/release/terraform/$VERSION/$RELEASE_ZIP" "$BIG_BYTES"
    stop "$PROVENDER_PID"
done

log "warm: 1 and 4 parallel downloads over HTTP/1.1; $REPS run(s)"
fresh_provender warm
fetch "$PROVENDER_URL/$HOST/bench/big/1.0.0.json"
fetch "$ARCHIVE_URL"
fetch "$RELEASE_URL"
wait_h1 "$PROVENDER_URL" big 1.0.0
for url in "$NGINX_URL" "$RELEASE_URL" "$ARCHIVE_URL"; do check_big "$url"; done
release_hits() { metric "$PROVENDER_URL" 'provender_cache_lookups_total{kind="release_zip",result="hit"}'; }
hits_before=$(release_hits)
for rep in $(seq "$REPS"); do
    for n in 1 4; do
        for side in nginx release archive; do
            case $side in
                nginx) url=$NGINX_URL ;;
                release) url=$RELEASE_URL ;;
                archive) url=$ARCHIVE_URL ;;
            esac
            mibps=$(parallel_download "$url" "$n" "$BIG_BYTES" --http1.1)
            printf '  run %s, x%s, %s: %.0f MiB/s\n' "$rep" "$n" "$side" "$mibps" >&2
            record "warm.$n.$side.mibps" "$mibps"
        done
    done
done
# Every warm release download (1 + 4 per run) was answered from the cache.
[ $(($(release_hits) - hits_before)) = $((REPS * 5)) ] \
    || die "the warm release downloads were not all answered from the cache"

python3 - "$RESULTS" <<'EOF' | tee ${OUT:+"$OUT"}
import statistics, sys
values = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    values.setdefault(k, []).append(float(v))
med = lambda k: statistics.median(values[k])
print("| figure | CLI release | provider archive | reference | release / archive | release / reference |")
print("|---|---|---|---|---|---|")
r, a, o = med("cold.release.total"), med("cold.archive.total"), med("cold.origin.total")
print(f"| cold miss, s (reference: straight from the origin) | {r:.3f} | {a:.3f} | {o:.3f} | {r / a:.2f}x | {r / o:.2f}x |")
for n in (1, 4):
    r, a, g = (med(f"warm.{n}.{s}.mibps") for s in ("release", "archive", "nginx"))
    print(f"| warm, {n} stream(s), MiB/s (reference: nginx) | {r:.0f} | {a:.0f} | {g:.0f} | {r / a:.2f}x | {r / g:.2f}x |")
print()
print(f"Zip: {med('size.big.mib'):.1f} MiB; HTTP/1.1 over TLS 1.3 on loopback; median of "
      f"{len(values['cold.release.total'])} runs. Times: lower is better; MiB/s: higher is better.")
EOF
