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

QUICK=0 BUILD=1 CRITERION=1 KEEP=0 OUT=""
while [ $# -gt 0 ]; do
    case $1 in
        --quick) QUICK=1 ;;
        --skip-build) BUILD=0 ;;
        --skip-criterion) CRITERION=0 ;;
        --keep) KEEP=1 ;;
        --out) OUT=$2; shift ;;
        -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done

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
HOST=registry.terraform.io

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------
apt_install() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        die "missing $*: install it and rerun"
    fi
}
NGINX=$(command -v nginx || true)
[ -n "$NGINX" ] || [ ! -x /usr/sbin/nginx ] || NGINX=/usr/sbin/nginx
if [ -z "$NGINX" ]; then apt_install nginx; NGINX=$(command -v nginx || echo /usr/sbin/nginx); fi
command -v wrk >/dev/null || apt_install wrk
command -v gpg >/dev/null || apt_install gnupg
for tool in openssl curl python3 gpgconf; do
    command -v $tool >/dev/null || die "$tool is needed"
done
[ -x "$TERRAFORM" ] || die "the h1 reference and the static mirror need terraform at $TERRAFORM"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# ---------------------------------------------------------------------------------------------
# Work directory and clean-up: every process started here is recorded and stopped on exit.
# ---------------------------------------------------------------------------------------------
WORK=$(mktemp -d -t provender-bench.XXXXXX)
chmod 755 "$WORK" # nginx workers run as an unprivileged user and read the files served
RESULTS=$WORK/results
: >"$RESULTS"
PIDS=()
cleanup() {
    local status=$?
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    [ -d "$WORK/gnupg" ] && GNUPGHOME=$WORK/gnupg gpgconf --kill all 2>/dev/null || true
    if [ $KEEP = 1 ]; then
        echo "work directory kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

record() { echo "$1 $2" >>"$RESULTS"; }
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.4f}')" "$1" "$2"; }
calc() { python3 -c "import sys; print(eval(sys.argv[1]))" "$1"; }
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}
wait_port() {
    local port=$1 pid=$2 i
    for i in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

# ---------------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------------
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), \
$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo); load $(cut -d' ' -f1-3 /proc/loadavg)"
if python3 -c "import sys; sys.exit(float(sys.argv[1]) < 1.0)" "$LOAD_START"; then
    echo "warning: load average $LOAD_START: other processes compete for the CPU; figures will be noisy" >&2
fi
if [ $BUILD = 1 ]; then
    log "cargo build --release"
    cargo build --release --locked
fi
REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src Cargo.toml Cargo.lock 2>/dev/null || REVISION="$REVISION (with uncommitted changes)"
PROVENDER=$ROOT/target/release/provender
[ -x "$PROVENDER" ] || die "no $PROVENDER (run without --skip-build)"

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
# PKI: one throw-away CA; one server certificate for every server here.
# ---------------------------------------------------------------------------------------------
log "test CA and server certificate (openssl)"
PKI=$WORK/pki
mkdir -m 700 "$PKI"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=provender bench CA" -keyout "$PKI/ca-key.pem" -out "$PKI/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$HOST" \
    -keyout "$PKI/server-key.pem" -out "$PKI/server.csr" 2>/dev/null
printf '%s\n' "subjectAltName=DNS:$HOST,DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
    "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$PKI/server.ext"
openssl x509 -req -in "$PKI/server.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca-key.pem" \
    -CAcreateserial -days 2 -extfile "$PKI/server.ext" -out "$PKI/server.pem" 2>/dev/null
CA=$PKI/ca.pem CERT=$PKI/server.pem KEY=$PKI/server-key.pem

# ---------------------------------------------------------------------------------------------
# The origin registry: static files, signed with a throw-away gpg key, served by nginx.
# ---------------------------------------------------------------------------------------------
log "origin fixtures: small provider (8 versions x 5 platforms), ${MID_MIB} MiB and ${BIG_MIB} MiB archives"
mkdir -m 700 "$WORK/gnupg"
python3 bench/fixtures.py --out "$WORK/origin" --gnupghome "$WORK/gnupg" \
    --big-mib "$BIG_MIB" --mid-mib "$MID_MIB"
GNUPGHOME=$WORK/gnupg gpgconf --kill all 2>/dev/null || true
BIG_ZIP=terraform-provider-big_1.0.0_linux_amd64.zip
MID_ZIP=terraform-provider-mid_1.0.0_linux_amd64.zip
BIG_BYTES=$(stat -c %s "$WORK/origin/files/bench/big/1.0.0/$BIG_ZIP")
MID_BYTES=$(stat -c %s "$WORK/origin/files/bench/mid/1.0.0/$MID_ZIP")
record size.big.mib "$(calc "$BIG_BYTES / 2**20")"
record size.mid.mib "$(calc "$MID_BYTES / 2**20")"

read -r ORIGIN_PORT LIMITED_PORT MIRROR_PORT PROVENDER_PORT COLD_PORT <<<"$(free_ports 5)"

# nginx with the settings both nginx instances share: TLS 1.3 only, keep-alive, no access log.
nginx_conf() { # name port root workers extra-server-config
    local dir=$WORK/nginx-$1
    mkdir -p "$dir"
    cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes $4;
worker_rlimit_nofile 16384;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  sendfile on;
  # Over TLS without kernel TLS sendfile does not apply: nginx reads files into these buffers.
  # 256 KiB, like provender's reads (the default, 2 x 32 KiB, is slower for large archives).
  output_buffers 2 256k;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 65s;
  keepalive_requests 1000000;
  types {
    application/json json;
    application/zip zip;
  }
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$2 ssl;
    server_name $HOST localhost;
    ssl_certificate $CERT;
    ssl_certificate_key $KEY;
    ssl_protocols TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    root $3;
$5
  }
}
EOF
}
# Starts nginx in the foreground of a background job; sets STARTED to its master's pid.
start_nginx() { # name port
    local dir=$WORK/nginx-$1
    "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" </dev/null >/dev/null 2>&1 &
    STARTED=$!
    PIDS+=("$STARTED")
    wait_port "$2" "$STARTED" || { cat "$dir/error.log" >&2; die "nginx $1 did not start"; }
}

log "origin: nginx on 127.0.0.1:$ORIGIN_PORT"
nginx_conf origin "$ORIGIN_PORT" "$WORK/origin" 1 \
    "    location /v1/providers/ { default_type application/json; }"
start_nginx origin "$ORIGIN_PORT"
ORIGIN=https://127.0.0.1:$ORIGIN_PORT
# The same origin behind a link of $LINK per connection (nginx limit_rate), like a fast
# internet connection to a public registry.
log "origin with limit_rate $LINK: nginx on 127.0.0.1:$LIMITED_PORT"
nginx_conf origin-limited "$LIMITED_PORT" "$WORK/origin" 1 \
    "    limit_rate $LINK;
    location /v1/providers/ { default_type application/json; }"
start_nginx origin-limited "$LIMITED_PORT"
LIMITED=https://127.0.0.1:$LIMITED_PORT
curl -sSf --cacert "$CA" "$ORIGIN/.well-known/terraform.json" >/dev/null

# ---------------------------------------------------------------------------------------------
# The static mirror: what `terraform providers mirror` writes, from the same origin.
# ---------------------------------------------------------------------------------------------
TF_HOME=$WORK/tf-home
mkdir -p "$TF_HOME/empty-certs"
cat >"$TF_HOME/cli.tfrc" <<EOF
host "$HOST" {
  services = {
    "providers.v1" = "$ORIGIN/v1/providers/"
  }
}
EOF
tf() { # dir args...
    local dir=$1
    shift
    env -i PATH="$PATH" HOME="$TF_HOME" TF_CLI_CONFIG_FILE="$TF_HOME/cli.tfrc" \
        SSL_CERT_FILE="$CA" SSL_CERT_DIR="$TF_HOME/empty-certs" CHECKPOINT_DISABLE=1 \
        TF_IN_AUTOMATION=1 timeout 600 "$TERRAFORM" -chdir="$dir" "$@"
}
tf_config() { # dir type version
    mkdir -p "$1"
    cat >"$1/main.tf" <<EOF
terraform {
  required_providers {
    $2 = {
      source  = "$HOST/bench/$2"
      version = "$3"
    }
  }
}
EOF
}
MIRROR=$WORK/mirror
log "static mirror: terraform providers mirror (small: every version; mid, big: linux_amd64)"
for v in 1.0.0 1.1.0 1.2.0 1.3.0 2.0.0 2.1.0 2.2.0 2.3.0; do
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
provender_conf() { # file port cache-dir origin-port
    cat >"$1" <<EOF
[server]
listen = "127.0.0.1:$2"
tls_cert = "$CERT"
tls_key = "$KEY"
shutdown_grace = "5s"

[cache]
dir = "$3"

[upstream]
allowed_hosts = ["$HOST"]
ca_file = "$CA"

[upstream.hosts."$HOST"]
connect_to = "127.0.0.1:$4"
EOF
}
# Sets STARTED to the server's pid.
start_provender() { # config port log
    "$PROVENDER" serve --config "$1" </dev/null >>"$3" 2>&1 &
    STARTED=$!
    PIDS+=("$STARTED")
    wait_port "$2" "$STARTED" || { cat "$3" >&2; die "provender did not start"; }
    curl -sSf --cacert "$CA" "https://127.0.0.1:$2/healthz" >/dev/null
}
stop() { # pid
    local keep=() p
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}
# Waits until the version document lists h1 for every platform, i.e. the fills are committed.
# (Polls with curl and grep only, to take little CPU from the fill it waits for.)
wait_h1() { # base-url type version
    local i body
    for i in $(seq 1200); do
        body=$(curl -sSf --cacert "$CA" "$1/$HOST/bench/$2/$3.json")
        if [ "$(grep -o '"h1:' <<<"$body" | wc -l)" = "$(grep -o '"url"' <<<"$body" | wc -l)" ]; then
            return 0
        fi
        sleep 0.25
    done
    die "$2 $3 was not committed to provender's cache in time"
}

log "provender on 127.0.0.1:$PROVENDER_PORT"
provender_conf "$WORK/provender.toml" "$PROVENDER_PORT" "$WORK/cache" "$ORIGIN_PORT"
start_provender "$WORK/provender.toml" "$PROVENDER_PORT" "$WORK/provender.log"
PROVENDER_PID=$STARTED
PROVENDER_URL=https://127.0.0.1:$PROVENDER_PORT
sleep 1
record rss.idle "$(status_kib "$PROVENDER_PID" VmRSS)"

log "warming provender: every document and archive the benchmarks ask for"
fetch() { curl -sSf --http1.1 --cacert "$CA" -o /dev/null "$1"; }
fetch "$PROVENDER_URL/$HOST/bench/small/index.json"
for v in 1.0.0 1.1.0 1.2.0 1.3.0 2.0.0 2.1.0 2.2.0 2.3.0; do
    fetch "$PROVENDER_URL/$HOST/bench/small/$v.json"
    for p in darwin_amd64 darwin_arm64 linux_amd64 linux_arm64 windows_amd64; do
        fetch "$PROVENDER_URL/$HOST/bench/small/terraform-provider-small_${v}_$p.zip"
    done
    wait_h1 "$PROVENDER_URL" small "$v"
done
for t in mid big; do
    fetch "$PROVENDER_URL/$HOST/bench/$t/index.json"
    fetch "$PROVENDER_URL/$HOST/bench/$t/1.0.0.json"
    fetch "$PROVENDER_URL/$HOST/bench/$t/terraform-provider-${t}_1.0.0_linux_amd64.zip"
    wait_h1 "$PROVENDER_URL" $t 1.0.0
done
for doc in small/index.json small/2.3.0.json; do
    for side in nginx:$NGINX_URL provender:$PROVENDER_URL; do
        record "doc.${doc//\//.}.${side%%:*}.bytes" \
            "$(curl -sSf --http1.1 --cacert "$CA" "${side#*:}/$HOST/bench/$doc" | wc -c)"
    done
done
cmp <(curl -sSf --cacert "$CA" "$NGINX_URL/$HOST/bench/big/$BIG_ZIP" | sha256sum) \
    <(curl -sSf --cacert "$CA" "$PROVENDER_URL/$HOST/bench/big/$BIG_ZIP" | sha256sum) \
    || die "nginx and provender serve different bytes for $BIG_ZIP"

# ---------------------------------------------------------------------------------------------
# Warm metadata: wrk against both, alternating which goes first.
# ---------------------------------------------------------------------------------------------
# CPU time (user + system, in clock ticks) used so far by the processes of one side.
TICK_HZ=$(getconf CLK_TCK)
cpu_ticks() { # nginx|provender
    local pids=("$PROVENDER_PID") pid total=0
    [ "$1" = nginx ] && pids=("$MIRROR_PID" $(pgrep -P "$MIRROR_PID"))
    for pid in "${pids[@]}"; do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
    done
    echo "$total"
}
run_wrk() { # name conns url
    local out=$WORK/wrk-$1-c$2-$(date +%s%N).txt
    timeout $((DURATION + 30)) wrk -t2 -c"$2" -d"${DURATION}s" --latency "$3" >"$out" 2>&1 \
        || { cat "$out" >&2; die "wrk failed"; }
    python3 bench/report.py wrk "$out"
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
# Downloads URL N times in parallel; prints the aggregate MiB/s (all bytes / wall time).
parallel_download() { # url n bytes
    local i t0 t1 pids=()
    t0=$(now)
    for i in $(seq "$2"); do
        curl -sSf --http1.1 --cacert "$CA" --max-time 600 -o /dev/null "$1" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || die "a download of $1 failed"; done
    t1=$(now)
    calc "$2 * $3 / 2**20 / ($t1 - $t0)"
}
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
# One timed download; records "<name>.ttfb/.total/.mibps".
timed_download() { # name url
    local out
    out=$(curl -sSf --http1.1 --cacert "$CA" --max-time 600 -o /dev/null \
        -w '%{time_starttransfer} %{time_total} %{speed_download}' "$2")
    read -r ttfb total speed <<<"$out"
    printf '  %s: first byte %.4f s, total %.3f s\n' "$1" "$ttfb" "$total" >&2
    record "$1.ttfb" "$ttfb"
    record "$1.total" "$total"
    record "$1.mibps" "$(calc "$speed / 2**20")"
}
h1_seconds() { # base-url
    curl -sSf --cacert "$CA" "$1/metrics" \
        | awk '$1 == "provender_h1_hash_duration_seconds_sum" { print $2 }'
}
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
    timed_download "cold.$1" "$COLD_URL/$HOST/bench/big/$BIG_ZIP"
    wait_h1 "$COLD_URL" big 1.0.0
    if [ "$1" = provender ]; then record h1.provender_fill.s "$(h1_seconds "$COLD_URL")"; fi
    stop "$pid"
}
log "cold miss: $BIG_ZIP, $COLD_REPS run(s); provender with an empty cache on 127.0.0.1:$COLD_PORT"
for rep in $(seq "$COLD_REPS"); do
    timed_download cold.direct "$ORIGIN/files/bench/big/1.0.0/$BIG_ZIP"
    cold_miss provender "$ORIGIN_PORT" yes
    timed_download cold.direct_limited "$LIMITED/files/bench/big/1.0.0/$BIG_ZIP"
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
    echo "$(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), \
$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM; \
$([ $QUICK = 1 ] && echo "bench/run.sh --quick" || echo "bench/run.sh") at provender $REVISION; \
nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///'), $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}'), \
$(curl --version | head -1 | awk '{print $1, $2}'), $(tf "$WORK" version | head -1); \
load average $LOAD_START before the run."
    echo
    python3 bench/report.py table "$RESULTS"
} | tee "${OUT:-/dev/null}"
