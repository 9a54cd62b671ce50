# What bench/run.sh and bench/storage.sh share. Sourced by them after they `cd` to the
# repository root; not meant to be run on its own. It only defines functions and constants;
# the scripts call them in this order:
#
#   bench_args "$@"    common options (--quick, --skip-build, --keep, --out FILE, --help); a
#                      script's own options go to its bench_option function, if it has one
#   bench_tools        nginx, wrk, gpg, openssl, curl, python3 (apt-get as root when missing)
#   bench_workdir NAME the work directory, the results file and the clean-up trap
#   bench_machine      machine and load average on stderr (sets LOAD_START)
#   bench_build        cargo build --release --locked unless --skip-build (PROVENDER, REVISION);
#                      PROVENDER_BIN=<file> measures that binary instead (e.g. an earlier build)
#   bench_pki          throw-away CA and server certificate (CA, CERT, KEY)
#   bench_origin       origin registry fixtures (BIG_ZIP, BIG_BYTES, BIG_SHA256, MID_...)
#   start_origin ...   an nginx serving them
#   terraform_home     a terraform CLI home pointed at the origin (then `tf`, `tf_config`), for
#                      the static mirror nginx serves
#
# then start provender instances (provender_conf, start_provender, warm_provender) and measure
# with run_wrk, parallel_download and timed_download, which check every answer: status 200
# and the expected size for archives, no non-2xx answer in a wrk run.

HOST=registry.terraform.io

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Options, tools, work directory
# ---------------------------------------------------------------------------------------------
bench_args() {
    QUICK=0 BUILD=1 KEEP=0 OUT=""
    while [ $# -gt 0 ]; do
        case $1 in
            --quick) QUICK=1 ;;
            --skip-build) BUILD=0 ;;
            --keep) KEEP=1 ;;
            --out) [ $# -ge 2 ] || die "--out needs a file name"; OUT=$2; shift ;;
            -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
            *)
                if ! { declare -F bench_option >/dev/null && bench_option "$1"; }; then
                    echo "unknown argument: $1 (see --help)" >&2
                    exit 64
                fi
                ;;
        esac
        shift
    done
}

apt_install() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        die "missing $*: install it and rerun"
    fi
}

bench_tools() {
    NGINX=$(command -v nginx || true)
    [ -n "$NGINX" ] || [ ! -x /usr/sbin/nginx ] || NGINX=/usr/sbin/nginx
    if [ -z "$NGINX" ]; then apt_install nginx; NGINX=$(command -v nginx || echo /usr/sbin/nginx); fi
    command -v wrk >/dev/null || apt_install wrk
    command -v gpg >/dev/null || apt_install gnupg
    local tool
    for tool in openssl curl python3 gpgconf sha256sum; do
        command -v $tool >/dev/null || die "$tool is needed"
    done
    ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
}

# Every process started here is recorded in PIDS and stopped on exit (also on Ctrl-C).
bench_workdir() { # name
    WORK=$(mktemp -d -t "$1.XXXXXX")
    chmod 755 "$WORK" # nginx workers run as an unprivileged user and read the files served
    RESULTS=$WORK/results
    : >"$RESULTS"
    PIDS=()
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}
bench_cleanup() {
    local status=$? pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    [ -d "$WORK/gnupg" ] && GNUPGHOME=$WORK/gnupg gpgconf --kill all 2>/dev/null || true
    if [ "$KEEP" = 1 ]; then
        echo "work directory kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit $status
}

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
# A process and its children (nginx's master and workers).
tree_pids() { echo "$1" $(pgrep -P "$1"); }
# CPU time (user + system, in clock ticks) used so far by these processes.
TICK_HZ=$(getconf CLK_TCK)
cpu_ticks_of() { # pid...
    local pid total=0
    for pid in "$@"; do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
    done
    echo "$total"
}

# ---------------------------------------------------------------------------------------------
# Machine, build
# ---------------------------------------------------------------------------------------------
machine() {
    echo "$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), \
$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM"
}
bench_machine() {
    LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
    log "machine: $(machine); load $(cut -d' ' -f1-3 /proc/loadavg)"
    if python3 -c "import sys; sys.exit(float(sys.argv[1]) < 1.0)" "$LOAD_START"; then
        echo "warning: load average $LOAD_START: other processes compete for the CPU; figures will be noisy" >&2
    fi
}
bench_build() {
    if [ "$BUILD" = 1 ]; then
        log "cargo build --release"
        cargo build --release --locked
    fi
    REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    git diff --quiet HEAD -- src Cargo.toml Cargo.lock 2>/dev/null || REVISION="$REVISION (with uncommitted changes)"
    PROVENDER=${PROVENDER_BIN:-$ROOT/target/release/provender}
    [ -x "$PROVENDER" ] || die "no $PROVENDER (run without --skip-build)"
    # Another build under test (e.g. the previous release, to compare against): its path.
    [ -z "${PROVENDER_BIN:-}" ] || REVISION="$(basename "$PROVENDER_BIN") (PROVENDER_BIN)"
}
# The tool versions every report names.
tool_versions() {
    echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///'), $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}'), \
$(curl --version | head -1 | awk '{print $1, $2}')"
}

# ---------------------------------------------------------------------------------------------
# PKI: one throw-away CA; one server certificate for every server here.
# ---------------------------------------------------------------------------------------------
bench_pki() {
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
}

# ---------------------------------------------------------------------------------------------
# The origin registry: static files, signed with a throw-away gpg key, served by nginx.
# ---------------------------------------------------------------------------------------------
SMALL_VERSIONS=(1.0.0 1.1.0 1.2.0 1.3.0 2.0.0 2.1.0 2.2.0 2.3.0)
SMALL_PLATFORMS=(darwin_amd64 darwin_arm64 linux_amd64 linux_arm64 windows_amd64)
BIG_ZIP=terraform-provider-big_1.0.0_linux_amd64.zip
MID_ZIP=terraform-provider-mid_1.0.0_linux_amd64.zip
bench_origin() { # big-mib mid-mib
    log "origin fixtures: small provider (8 versions x 5 platforms), ${2} MiB and ${1} MiB archives"
    mkdir -m 700 "$WORK/gnupg"
    python3 bench/fixtures.py --out "$WORK/origin" --gnupghome "$WORK/gnupg" \
        --big-mib "$1" --mid-mib "$2"
    GNUPGHOME=$WORK/gnupg gpgconf --kill all 2>/dev/null || true
    BIG_BYTES=$(stat -c %s "$WORK/origin/files/bench/big/1.0.0/$BIG_ZIP")
    MID_BYTES=$(stat -c %s "$WORK/origin/files/bench/mid/1.0.0/$MID_ZIP")
    BIG_SHA256=$(sha256sum "$WORK/origin/files/bench/big/1.0.0/$BIG_ZIP" | cut -d' ' -f1)
    record size.big.mib "$(calc "$BIG_BYTES / 2**20")"
    record size.mid.mib "$(calc "$MID_BYTES / 2**20")"
}

# nginx with the settings every nginx here shares: TLS 1.3 only, keep-alive, no access log.
nginx_conf() { # name port root workers extra-server-config [listen-options]
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
    listen 127.0.0.1:$2 ${6:-ssl};
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
# The origin registry served by one nginx worker; extra server configuration (e.g. limit_rate)
# is optional. Sets STARTED.
start_origin() { # name port [extra-server-config]
    log "$1: nginx on 127.0.0.1:$2${3:+ ($3)}"
    nginx_conf "$1" "$2" "$WORK/origin" 1 "${3:+    $3;
}    location /v1/providers/ { default_type application/json; }"
    start_nginx "$1" "$2"
    curl -sSf --cacert "$CA" "https://127.0.0.1:$2/.well-known/terraform.json" >/dev/null
}

# ---------------------------------------------------------------------------------------------
# provender
# ---------------------------------------------------------------------------------------------
provender_conf() { # file port cache-dir origin-port [extra [cache] settings and tables]
    cat >"$1" <<EOF
[server]
listen = "127.0.0.1:$2"
tls_cert = "$CERT"
tls_key = "$KEY"
shutdown_grace = "5s"

[upstream]
allowed_hosts = ["$HOST"]
ca_file = "$CA"

[upstream.hosts."$HOST"]
connect_to = "127.0.0.1:$4"

[cache]
dir = "$3"
${5:-}
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
fetch() { curl -sSf --http1.1 --cacert "$CA" -o /dev/null "$1"; }
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
# Fetches every document and archive the benchmarks ask for once, and waits until each archive
# is committed.
warm_provender() { # base-url
    local v p t
    fetch "$1/$HOST/bench/small/index.json"
    for v in "${SMALL_VERSIONS[@]}"; do
        fetch "$1/$HOST/bench/small/$v.json"
        for p in "${SMALL_PLATFORMS[@]}"; do
            fetch "$1/$HOST/bench/small/terraform-provider-small_${v}_$p.zip"
        done
        wait_h1 "$1" small "$v"
    done
    for t in mid big; do
        fetch "$1/$HOST/bench/$t/index.json"
        fetch "$1/$HOST/bench/$t/1.0.0.json"
        fetch "$1/$HOST/bench/$t/terraform-provider-${t}_1.0.0_linux_amd64.zip"
        wait_h1 "$1" $t 1.0.0
    done
}
# One value from provender's /metrics.
metric() { # base-url name
    curl -sSf --cacert "$CA" "$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}
h1_seconds() { metric "$1" provender_h1_hash_duration_seconds_sum; } # base-url
# Dies unless URL serves exactly the origin's large archive (status, size and SHA-256).
check_big() { # url
    local got
    got=$(curl -sSf --http1.1 --cacert "$CA" --max-time 600 "$1" | sha256sum | cut -d' ' -f1) \
        || die "download of $1 failed"
    [ "$got" = "$BIG_SHA256" ] || die "$1 answered other bytes than the origin's $BIG_ZIP (SHA-256 $got)"
}


# ---------------------------------------------------------------------------------------------
# The terraform CLI, for the static mirror nginx serves (`terraform providers mirror`).
# ---------------------------------------------------------------------------------------------
# A CLI home whose configuration sends the registry host's provider traffic to ORIGIN (sets
# TF_HOME); then `tf DIR ARGS...` runs $TERRAFORM there, and `tf_config DIR TYPE VERSION`
# writes a configuration requiring one bench provider.
terraform_home() { # origin-url
    TF_HOME=$WORK/tf-home
    mkdir -p "$TF_HOME/empty-certs"
    cat >"$TF_HOME/cli.tfrc" <<EOF
host "$HOST" {
  services = {
    "providers.v1" = "$1/v1/providers/"
  }
}
EOF
}
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

# ---------------------------------------------------------------------------------------------
# Measurements. Every answer is checked: a fast error page is not a fast server.
# ---------------------------------------------------------------------------------------------
# One wrk run; prints "rps p50_ms p99_ms errors requests". Dies on any non-2xx/3xx answer.
run_wrk() { # name conns url
    local out=$WORK/wrk-$1-c$2-$(date +%s%N).txt
    timeout $((DURATION + 30)) wrk -t2 -c"$2" -d"${DURATION}s" --latency "$3" >"$out" 2>&1 \
        || { cat "$out" >&2; die "wrk failed"; }
    if grep -q "Non-2xx or 3xx responses" "$out"; then
        cat "$out" >&2
        die "$3 answered errors under wrk"
    fi
    python3 bench/report.py wrk "$out"
}
# Dies unless curl's "-w '%{http_code} %{size_download}'" output says 200 and BYTES bytes.
check_answer() { # url bytes "code size"
    local code size
    read -r code size _ <<<"$3"
    [ "$code" = 200 ] && [ "$size" = "$2" ] \
        || die "$1 answered status $code with $size bytes (expected 200 with $2)"
}
# Downloads URL N times in parallel, each on its own connection (curl's protocol option: --http1.1
# unless given); prints the aggregate MiB/s (all bytes / wall time).
parallel_download() { # url n bytes [--http1.1|--http2]
    local i t0 t1 pids=() dir
    dir=$(mktemp -d "$WORK/dl.XXXXXX")
    t0=$(now)
    for i in $(seq "$2"); do
        curl -sSf "${4:---http1.1}" --cacert "$CA" --max-time 600 -o /dev/null \
            -w '%{http_code} %{size_download}' "$1" >"$dir/$i" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || die "a download of $1 failed"; done
    t1=$(now)
    for i in $(seq "$2"); do check_answer "$1" "$3" "$(cat "$dir/$i")"; done
    rm -rf "$dir"
    calc "$2 * $3 / 2**20 / ($t1 - $t0)"
}
# One timed download; records "<name>.ttfb/.total/.mibps".
timed_download() { # name url bytes
    local out ttfb total speed
    out=$(curl -sSf --http1.1 --cacert "$CA" --max-time 600 -o /dev/null \
        -w '%{http_code} %{size_download} %{time_starttransfer} %{time_total} %{speed_download}' "$2") \
        || die "download of $2 failed"
    check_answer "$2" "$3" "$out"
    read -r _ _ ttfb total speed <<<"$out"
    printf '  %s: first byte %.4f s, total %.3f s\n' "$1" "$ttfb" "$total" >&2
    record "$1.ttfb" "$ttfb"
    record "$1.total" "$total"
    record "$1.mibps" "$(awk -v b="$speed" 'BEGIN { print b / 1048576 }')"
}
# N downloads of URL multiplexed on one HTTP/2 connection; prints the aggregate MiB/s.
multiplexed_download() { # url n bytes
    local i t0 t1 args=() out
    for i in $(seq "$2"); do args+=(-o /dev/null "$1"); done
    t0=$(now)
    out=$(curl -sSf --http2 --parallel --parallel-max "$2" --cacert "$CA" --max-time 600 \
        -w '%{http_code} %{size_download} %{num_connects}\n' "${args[@]}") \
        || die "a multiplexed download of $1 failed"
    t1=$(now)
    while read -r line; do check_answer "$1" "$3" "$line"; done <<<"$out"
    [ "$(awk '{ n += $3 } END { print n }' <<<"$out")" = 1 ] \
        || die "curl opened more than one connection for the multiplexed downloads of $1"
    calc "$2 * $3 / 2**20 / ($t1 - $t0)"
}
