#!/usr/bin/env bash
# The git door against the origin it caches: `git clone` of a repository of about 50 MiB
# (incompressible files over a few commits), straight from an HTTPS origin (nginx, fcgiwrap and
# `git http-backend`, the usual way to serve git over HTTP) and through provender, cold (the
# first clone, which fills the cache) and warm, side by side in one run.
#
#   bench/git.sh            5 warm clones each way, alternating
#   bench/git.sh --quick    a 10 MiB repository, 2 clones each way
#
# Every clone is checked: git must succeed and the clone's HEAD must be the origin's tip.
# Options: --skip-build (measure target/release/provender as it is), --keep, --out FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

source bench/lib.sh

bench_args "$@"
if [ $QUICK = 1 ]; then MIB=10 REPS=2; else MIB=50 REPS=5; fi

bench_tools
command -v fcgiwrap >/dev/null || apt_install fcgiwrap
command -v git >/dev/null || die "git is needed"
BACKEND=$(git --exec-path)/git-http-backend
[ -x "$BACKEND" ] || die "no $BACKEND"
bench_workdir provender-git
bench_machine
bench_build
bench_pki

log "origin repository: ${MIB} MiB of random files over 5 commits"
REPOS=$WORK/repos
git init --quiet --bare --initial-branch=main "$REPOS/bench/big.git"
SRC=$WORK/src
git init --quiet --initial-branch=main "$SRC"
for commit in 1 2 3 4 5; do
    mkdir -p "$SRC/part$commit"
    for f in $(seq 1 20); do
        head -c $((MIB * 1024 * 1024 / 100)) /dev/urandom >"$SRC/part$commit/blob$f"
    done
    git -C "$SRC" add -A
    git -C "$SRC" -c user.name=bench -c user.email=bench@example.invalid commit --quiet -m "part $commit"
done
git -C "$SRC" tag v1.0.0
git -C "$SRC" push --quiet "$REPOS/bench/big.git" main v1.0.0
TIP=$(git -C "$SRC" rev-parse HEAD)
PACK_MIB=$(du -sm "$REPOS/bench/big.git" | cut -f1)
record size.repo.mib "$PACK_MIB"

read -r ORIGIN_PORT MIRROR_PORT <<<"$(free_ports 2)"
SOCK=$WORK/fcgiwrap.sock
fcgiwrap -s "unix:$SOCK" </dev/null >/dev/null 2>&1 &
PIDS+=("$!")
for _ in $(seq 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
chmod 666 "$SOCK"
chmod -R a+rX "$REPOS"
log "origin: nginx + fcgiwrap + git http-backend on 127.0.0.1:$ORIGIN_PORT"
nginx_conf origin "$ORIGIN_PORT" "$WORK" 1 "    client_max_body_size 0;
    location ~ ^/git(/.*)\$ {
      fastcgi_pass unix:$SOCK;
      fastcgi_param SCRIPT_FILENAME $BACKEND;
      fastcgi_param GIT_PROJECT_ROOT $REPOS;
      fastcgi_param GIT_HTTP_EXPORT_ALL \"\";
      fastcgi_param PATH_INFO \$1;
      fastcgi_param QUERY_STRING \$query_string;
      fastcgi_param REQUEST_METHOD \$request_method;
      fastcgi_param CONTENT_TYPE \$content_type;
      fastcgi_param CONTENT_LENGTH \$content_length;
      fastcgi_param HTTP_GIT_PROTOCOL \$http_git_protocol;
      fastcgi_param HTTP_CONTENT_ENCODING \$http_content_encoding;
      fastcgi_param REMOTE_ADDR \$remote_addr;
    }"
start_nginx origin "$ORIGIN_PORT"

log "provender on 127.0.0.1:$MIRROR_PORT ($REVISION)"
provender_conf "$WORK/provender.toml" "$MIRROR_PORT" "$WORK/cache" "$ORIGIN_PORT" "
[git]
allowed_hosts = [\"$HOST\"]
refresh_after = \"1h\""
start_provender "$WORK/provender.toml" "$MIRROR_PORT" "$WORK/provender.log"
MIRROR_PID=$STARTED

DIRECT=https://127.0.0.1:$ORIGIN_PORT/git/bench/big.git
THROUGH=https://127.0.0.1:$MIRROR_PORT/git/$HOST/git/bench/big.git
# One timed clone into a fresh directory, checked; prints the seconds it took.
timed_clone() { # name url
    local dest=$WORK/clones/$1 start end
    rm -rf "$dest"
    start=$(now)
    env -i PATH="$PATH" HOME="$WORK" GIT_CONFIG_NOSYSTEM=1 \
        git -c http.sslCAInfo="$CA" clone --quiet "$2" "$dest" </dev/null
    end=$(now)
    [ "$(git -C "$dest" rev-parse HEAD)" = "$TIP" ] || die "$1: the clone's HEAD is not the origin's tip"
    rm -rf "$dest"
    elapsed "$start" "$end"
}
mkdir -p "$WORK/clones"
# provender's CPU time with that of the git processes it ran and reaped (upload-pack, and
# pack-objects under it; the refresh's fetch), in clock ticks.
cpu_with_children() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat"; }

log "cold: the first clone through provender (fills the cache)"
ticks=$(cpu_with_children "$MIRROR_PID")
record cold.mirror.s "$(timed_clone cold "$THROUGH")"
record cold.mirror.cpu_s "$(calc "($(cpu_with_children "$MIRROR_PID") - $ticks) / $TICK_HZ")"
log "warm: $REPS clones each way, alternating"
for rep in $(seq "$REPS"); do
    record warm.direct.s "$(timed_clone direct "$DIRECT")"
    ticks=$(cpu_with_children "$MIRROR_PID")
    record warm.mirror.s "$(timed_clone mirror "$THROUGH")"
    record warm.mirror.cpu_s "$(calc "($(cpu_with_children "$MIRROR_PID") - $ticks) / $TICK_HZ")"
done

median() { # key
    awk -v k="$1" '$1 == k { print $2 }' "$RESULTS" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
DIRECT_S=$(median warm.direct.s)
WARM_S=$(median warm.mirror.s)
COLD_S=$(median cold.mirror.s)
REPORT=$(cat <<EOF
$(date +%F), $(machine); bench/git.sh$([ $QUICK = 1 ] && echo " --quick") at $REVISION; $(git --version), $(tool_versions | cut -d, -f1); load average $LOAD_START before the run.

| git clone of a ${PACK_MIB} MiB repository (median of $REPS) | seconds | / direct |
|---|---|---|
| straight from the origin (nginx + git http-backend) | $DIRECT_S | 1.00 |
| through provender, warm | $WARM_S | $(calc "round($WARM_S / $DIRECT_S, 2)") |
| through provender, cold (first clone, fills the cache; one run) | $COLD_S | $(calc "round($COLD_S / $DIRECT_S, 2)") |

provender CPU (with the git processes it runs) per warm clone: $(median warm.mirror.cpu_s) s; for the cold one: $(median cold.mirror.cpu_s) s.
EOF
)
echo
echo "$REPORT"
[ -z "$OUT" ] || echo "$REPORT" >"$OUT"
