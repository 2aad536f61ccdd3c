#!/usr/bin/env bash
# Load measurement on loopback: the sidecar side by side with a direct connection and with
# nginx as a reverse proxy, in the same run on the same machine.
#
#   bash testdata/bench/run.sh                     # 5 rounds of 3 s per case, about 7 minutes
#   ROUNDS=3 DURATION=2s LAT_DURATION=2s bash testdata/bench/run.sh
#   SIDECAR_BIN=/path/to/failover bash testdata/bench/run.sh   # a prebuilt binary (e.g. with profiling)
#   SIDECAR_GOMAXPROCS=2 bash testdata/bench/run.sh          # the sidecar with an explicit GOMAXPROCS
#   SIDECAR_B_BIN=/path/to/other SIDECAR_B_GOMAXPROCS=1 bash testdata/bench/run.sh
#       # a second sidecar, "sidecar-b", measured in the same interleaved rounds (an A/B:
#       # another build, or the same one with another GOMAXPROCS; either variable starts it)
#   WORKLOADS="chat sse paced" bash testdata/bench/run.sh
#       # also "paced": the same stream, its events sent PACED_GAP apart (1ms), as a model
#       # streams tokens: the proxy pipes it event by event (testdata/bench/paced)
#
# What it does: installs wrk and nginx with apt-get when they are missing (Debian), builds the
# sidecar, starts an nginx mock upstream that answers from memory (a 641-byte chat completion,
# or a 21-event SSE body with text/event-stream when the request sends
# Accept: text/event-stream), the sidecar pointed at it, and nginx as a reverse proxy to the
# same mock (keep-alive upstream; proxy_buffering off for SSE). Then wrk -t1 (POST with a JSON
# body) against the mock directly, nginx and the sidecar, at 10 and 64 connections, chat and
# SSE, ROUNDS interleaved rounds of DURATION each; it prints medians of requests/s, p50 and
# p99 latency (wrk --latency), the latency added over the direct connection, the throughput
# ratio to nginx, and each proxy's CPU time per request (utime+stime from /proc/PID/stat) with its
# user-space part (utime) beside it.
# Then the same three paths at a fixed rate well below saturation (LAT_RATE requests/s over
# LAT_CONNS connections, testdata/bench/latency), where the latency a proxy adds is its own cost
# on the request's path rather than queueing behind other requests, and its CPU per request is
# what a request costs at a sidecar's usual load: every process sleeps between requests.
#
# The mock, the proxy and wrk share the machine's cores: compare ratios and CPU per request
# measured in the same run, not absolute requests per second. Everything listens on
# 127.0.0.1 only; every process started here is ended on exit, and temporary files go to one
# temporary directory that is removed.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-3s}
WARMUP=${WARMUP:-1s}
CONNS=${CONNS:-"10 64"}
WORKLOADS=${WORKLOADS:-"chat sse"} # and "paced"
PACED_GAP=${PACED_GAP:-1ms}
LAT_RATE=${LAT_RATE:-2000}         # the fixed-rate phase: requests per second over LAT_CONNS connections
LAT_CONNS=${LAT_CONNS:-10}
LAT_DURATION=${LAT_DURATION:-3s}
PORT_BASE=${PORT_BASE:-28400} # below the ephemeral range (32768-60999 on Linux): no outgoing connection holds these

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

log() { printf '%s\n' "$*" >&2; }
die() { log "run.sh: $*"; exit 1; }

# --- tools -----------------------------------------------------------------------------------
need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	log "installing ${need[*]} with apt-get ..."
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
command -v go >/dev/null || die "go is needed to build the sidecar and the fixed-rate load generator"
CLK_TCK=$(getconf CLK_TCK)

# --- temporary directory and cleanup ---------------------------------------------------------
tmp=$(mktemp -d -t failover-bench.XXXXXX)
chmod 755 "$tmp" # nginx workers (nobody when started as root) read their files here
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- ports -----------------------------------------------------------------------------------
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
next_port=$PORT_BASE
take_port() { # VAR: the next free port from PORT_BASE on
	while ! port_free "$next_port"; do next_port=$((next_port + 1)); done
	printf -v "$1" '%s' "$next_port"
	next_port=$((next_port + 1))
}
MOCK="" NGINX_CHAT="" NGINX_SSE="" SIDECAR="" SIDECAR_METRICS="" SIDECAR_B="" SIDECAR_B_METRICS=""
take_port MOCK
take_port NGINX_CHAT
take_port NGINX_SSE
take_port SIDECAR
take_port SIDECAR_METRICS
take_port SIDECAR_B
take_port SIDECAR_B_METRICS
take_port PACED

# --- bodies ----------------------------------------------------------------------------------
# The chat completion, padded to 641 bytes, and a 21-event chat stream: the role, 18 content
# deltas, the finish and [DONE].
completion_of() {
	printf '{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}' "$1"
}
base=$(completion_of "")
sentence="Hello! I am a benchmark answer of a realistic size, neither empty nor long. "
content=""
while [ $((${#base} + ${#content})) -lt 641 ]; do content+=$sentence; done
content=${content:0:$((641 - ${#base}))}
COMPLETION=$(completion_of "$content")
[ ${#COMPLETION} -eq 641 ] || die "completion is ${#COMPLETION} bytes"

chunk() { printf 'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}\n\n' "$1" "$2"; }
{
	chunk '{"role":"assistant","content":""}' null
	words=(Hello "there," how can I help you "today?" I can answer "questions," write text and explain things well)
	for w in "${words[@]}"; do
		chunk "{\"content\":\"$w \"}" null
	done
	chunk '{}' '"stop"'
	printf 'data: [DONE]\n\n'
} >"$tmp/sse.txt"
SSE_EVENTS=$(grep -c '^data: ' "$tmp/sse.txt")
[ "$SSE_EVENTS" -eq 21 ] || die "the SSE body has $SSE_EVENTS events, want 21"

CHAT_REQ='{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in one word."}]}'
SSE_REQ='{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in one word."}]}'

# --- nginx: the mock upstream and the reverse proxy ------------------------------------------
# nginx quoted strings keep newlines; the bodies hold no quote, backslash or dollar sign.
cat >"$tmp/mock.conf" <<EOF
worker_processes 1;
pid $tmp/mock.pid;
error_log $tmp/mock-error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	keepalive_requests 1000000;
	keepalive_timeout 300s;
	client_body_temp_path $tmp/mock-body;
	proxy_temp_path $tmp/mock-proxy;
	fastcgi_temp_path $tmp/mock-fastcgi;
	uwsgi_temp_path $tmp/mock-uwsgi;
	scgi_temp_path $tmp/mock-scgi;
	upstream paced {
		server 127.0.0.1:$PACED;
		keepalive 128;
	}
	server {
		listen 127.0.0.1:$MOCK;
		location = /v1/chat/completions {
			if (\$http_x_bench_paced) { rewrite ^ /_paced last; }
			if (\$http_accept ~* "event-stream") { rewrite ^ /_sse last; }
			default_type application/json;
			return 200 '$COMPLETION';
		}
		# the paced workload: the stream from testdata/bench/paced, one event at a time
		location = /_paced {
			internal;
			proxy_pass http://paced;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
		}
		location = /_sse {
			internal;
			default_type text/event-stream;
			return 200 '$(cat "$tmp/sse.txt")

';
		}
	}
}
EOF

cat >"$tmp/proxy.conf" <<EOF
worker_processes auto;
pid $tmp/proxy.pid;
error_log $tmp/proxy-error.log warn;
events { worker_connections 4096; }
http {
	access_log /dev/null;
	keepalive_requests 1000000;
	keepalive_timeout 300s;
	client_body_temp_path $tmp/proxy-body;
	proxy_temp_path $tmp/proxy-proxy;
	fastcgi_temp_path $tmp/proxy-fastcgi;
	uwsgi_temp_path $tmp/proxy-uwsgi;
	scgi_temp_path $tmp/proxy-scgi;
	upstream mock {
		server 127.0.0.1:$MOCK;
		keepalive 128;
		keepalive_requests 1000000;
	}
	# chat: nginx's defaults for a JSON API (buffered)
	server {
		listen 127.0.0.1:$NGINX_CHAT;
		location / {
			proxy_pass http://mock;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
		}
	}
	# SSE: unbuffered, as an event stream must be proxied
	server {
		listen 127.0.0.1:$NGINX_SSE;
		location / {
			proxy_pass http://mock;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
		}
	}
}
EOF

started=""
start_nginx() { # conf name: the master's pid in $started
	"$NGINX" -t -q -p "$tmp" -e "$tmp/$2-error.log" -c "$1" || die "nginx rejected $1"
	"$NGINX" -p "$tmp" -e "$tmp/$2-error.log" -c "$1" -g 'daemon off;' >/dev/null 2>&1 &
	started=$!
	pids+=("$started")
}

(cd "$repo" && go build -o "$tmp/latency" ./testdata/bench/latency && go build -o "$tmp/paced" ./testdata/bench/paced)
"$tmp/paced" -listen "127.0.0.1:$PACED" -body "$tmp/sse.txt" -gap "$PACED_GAP" 2>"$tmp/paced-error.log" &
pids+=("$!")
SIDECAR_BIN=${SIDECAR_BIN:-}
if [ -z "$SIDECAR_BIN" ]; then
	log "building the sidecar ..."
	(cd "$repo" && go build -o "$tmp/failover" .)
	SIDECAR_BIN=$tmp/failover
fi

start_nginx "$tmp/mock.conf" mock
start_nginx "$tmp/proxy.conf" proxy
NGINX_PID=$started

wait_port() {
	local _
	for _ in $(seq 100); do
		curl -fs -o /dev/null "http://127.0.0.1:$1$2" -X "${3:-GET}" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
# start_sidecar BIN PORT METRICS_PORT GOMAXPROCS NAME: a sidecar pointed at the mock (GOMAXPROCS
# empty: its own default), its pid in $started once its metrics listener answers.
start_sidecar() {
	env -i PATH="$PATH" ${4:+GOMAXPROCS=$4} \
		FAILOVER_TARGET_0_URL="http://127.0.0.1:$MOCK/v1" FAILOVER_TARGET_0_NAME=mock \
		FAILOVER_LISTEN="127.0.0.1:$2" FAILOVER_METRICS_LISTEN="127.0.0.1:$3" \
		FAILOVER_LOG_FORMAT=json FAILOVER_LOG_LEVEL=info \
		"$1" >/dev/null 2>&1 &
	started=$!
	pids+=("$started")
	wait_port "$3" /healthz || die "$5 did not start (try: $1 -check)"
}
# SIDECAR_GOMAXPROCS, when set, is the sidecar's GOMAXPROCS (to compare with its own default).
start_sidecar "$SIDECAR_BIN" "$SIDECAR" "$SIDECAR_METRICS" "${SIDECAR_GOMAXPROCS:-}" "the sidecar"
SIDECAR_PID=$started
CONFIGS="direct nginx sidecar"
SIDECAR_B_PID=""
if [ -n "${SIDECAR_B_BIN:-}${SIDECAR_B_GOMAXPROCS:-}" ]; then
	start_sidecar "${SIDECAR_B_BIN:-$SIDECAR_BIN}" "$SIDECAR_B" "$SIDECAR_B_METRICS" "${SIDECAR_B_GOMAXPROCS:-}" sidecar-b
	SIDECAR_B_PID=$started
	CONFIGS="$CONFIGS sidecar-b"
fi
for p in "$MOCK" "$NGINX_CHAT" "$NGINX_SSE"; do
	wait_port "$p" /v1/chat/completions POST || die "nginx on port $p did not start: $(cat "$tmp"/*-error.log)"
done

# --- check that every path serves the full answer --------------------------------------------
url_of() { # config workload
	case $1-$2 in
	direct-*) echo "http://127.0.0.1:$MOCK/v1/chat/completions" ;;
	nginx-chat) echo "http://127.0.0.1:$NGINX_CHAT/v1/chat/completions" ;;
	nginx-sse | nginx-paced) echo "http://127.0.0.1:$NGINX_SSE/v1/chat/completions" ;;
	sidecar-b-*) echo "http://127.0.0.1:$SIDECAR_B/v1/chat/completions" ;;
	sidecar-*) echo "http://127.0.0.1:$SIDECAR/v1/chat/completions" ;;
	esac
}
for cfg in $CONFIGS; do
	got=$(curl -fsS "$(url_of $cfg chat)" -H 'Content-Type: application/json' -d "$CHAT_REQ")
	[ "$got" = "$COMPLETION" ] || die "$cfg chat answer differs: ${got:0:200}"
	curl -fsSN "$(url_of $cfg sse)" -H 'Content-Type: application/json' -H 'Accept: text/event-stream' \
		-d "$SSE_REQ" -o "$tmp/got.txt"
	cmp -s "$tmp/got.txt" "$tmp/sse.txt" || die "$cfg stream differs from the mock's: $(head -c 300 "$tmp/got.txt")"
	case " $WORKLOADS " in *" paced "*)
		curl -fsSN "$(url_of $cfg paced)" -H 'Content-Type: application/json' -H 'Accept: text/event-stream' \
			-H 'X-Bench-Paced: 1' -d "$SSE_REQ" -o "$tmp/got.txt"
		cmp -s "$tmp/got.txt" "$tmp/sse.txt" || die "$cfg paced stream differs from the mock's: $(head -c 300 "$tmp/got.txt")"
		;;
	esac
done

# --- wrk ---------------------------------------------------------------------------------------
lua_of() { # file body accept [paced]
	{
		echo 'wrk.method = "POST"'
		echo "wrk.body = '$2'"
		echo 'wrk.headers["Content-Type"] = "application/json"'
		echo 'wrk.headers["Authorization"] = "Bearer sk-bench-not-a-key"'
		[ -z "$3" ] || echo "wrk.headers[\"Accept\"] = \"$3\""
		[ -z "${4:-}" ] || echo 'wrk.headers["X-Bench-Paced"] = "1"'
	} >"$1"
}
lua_of "$tmp/chat.lua" "$CHAT_REQ" ""
lua_of "$tmp/sse.lua" "$SSE_REQ" "text/event-stream"
lua_of "$tmp/paced.lua" "$SSE_REQ" "text/event-stream" paced

# cpu_ticks PID...: "utime stime" of the processes and their children (nginx's workers).
cpu_ticks() {
	local user=0 sys=0 p c u s
	for p in "$@"; do
		for c in $p $(awk -v pp="$p" '$4 == pp { print $1 }' /proc/[0-9]*/stat 2>/dev/null); do
			[ -r "/proc/$c/stat" ] || continue
			read -r u s < <(awk '{ print $14, $15 }' "/proc/$c/stat")
			user=$((user + u)) sys=$((sys + s))
		done
	done
	echo "$user $sys"
}
rss_kib() { # PID...: resident memory of the processes and their children
	local total=0 p c
	for p in "$@"; do
		for c in $p $(awk -v pp="$p" '$4 == pp { print $1 }' /proc/[0-9]*/stat 2>/dev/null); do
			total=$((total + $(awk '/^VmRSS:/ { print $2 }' "/proc/$c/status" 2>/dev/null || echo 0)))
		done
	done
	echo "$total"
}
# to_us VALUE: wrk's 123.45us / 1.23ms / 1.02s in microseconds.
to_us() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else if (v ~ /m$/) print n * 60e6; else print n * 1e6 }'; }

results="$tmp/results.tsv"
: >"$results"
run_one() { # round workload conns config duration
	local round=$1 wl=$2 c=$3 cfg=$4 dur=$5 pid="" out before after
	case $cfg in
	nginx) pid=$NGINX_PID ;;
	sidecar) pid=$SIDECAR_PID ;;
	sidecar-b) pid=$SIDECAR_B_PID ;;
	esac
	before="0 0"
	[ -z "$pid" ] || before=$(cpu_ticks "$pid")
	out=$(wrk -t1 -c"$c" -d"$dur" --latency -s "$tmp/$wl.lua" "$(url_of "$cfg" "$wl")")
	after="0 0"
	[ -z "$pid" ] || after=$(cpu_ticks "$pid")
	[ "$round" -gt 0 ] || return 0
	local rps p50 p99 reqs errs bad
	rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
	p50=$(to_us "$(awk '$1 == "50%" { print $2 }' <<<"$out")")
	p99=$(to_us "$(awk '$1 == "99%" { print $2 }' <<<"$out")")
	reqs=$(awk '/requests in/ { print $1 }' <<<"$out")
	bad=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out")
	errs=$(awk '/Socket errors:/ { gsub(",", ""); print $4 + $6 + $8 + $10 }' <<<"$out")
	[ -z "$bad" ] || die "$cfg $wl c=$c: $bad answers were not 2xx"
	[ -z "$errs" ] || [ "$errs" -eq 0 ] || log "warning: $cfg $wl c=$c: $errs socket errors"
	# CPU per request, and its user-space part (the kernel's part, TCP on loopback, is much
	# the same for both proxies: the difference between them is mostly their own code's).
	local cpu="-" usr="-"
	if [ -n "$pid" ]; then
		read -r cpu usr < <(awk -v b="$before" -v a="$after" -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN {
			split(b, x, " "); split(a, y, " "); u = y[1] - x[1]; s = y[2] - x[2]
			printf "%.2f %.2f\n", (u + s) / hz * 1e6 / n, u / hz * 1e6 / n }')
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$wl" "$c" "$cfg" "$rps" "$p50" "$p99" "$cpu" "$usr" >>"$results"
	printf '  round %s  %-4s c=%-3s %-8s %10.0f req/s  p50 %7.0f us  p99 %7.0f us  cpu/req %s us (user %s)\n' \
		"$round" "$wl" "$c" "$cfg" "$rps" "$p50" "$p99" "$cpu" "$usr" >&2
}

log "warming up ..."
for wl in $WORKLOADS; do
	for c in $CONNS; do
		for cfg in $CONFIGS; do run_one 0 "$wl" "$c" "$cfg" "$WARMUP"; done
	done
done
log "measuring: $ROUNDS interleaved rounds of $DURATION per case ..."
for round in $(seq "$ROUNDS"); do
	for wl in $WORKLOADS; do
		for c in $CONNS; do
			for cfg in $CONFIGS; do run_one "$round" "$wl" "$c" "$cfg" "$DURATION"; done
		done
	done
done
# --- fixed rate ------------------------------------------------------------------------------
# wrk's closed loop keeps every connection busy: at saturation its latency is mostly queueing
# (p50 is about connections / throughput), which is throughput seen again. At a fixed rate well
# below saturation the latency a proxy adds is its own cost on the request's path. The load
# generator (testdata/bench/latency) sends on a schedule over LAT_CONNS keep-alive connections;
# "service" is from the moment a request is written to the last byte of its answer.
lat_results="$tmp/latency.tsv"
: >"$lat_results"
LAT_WARMUP=500ms
lat_one() { # round workload config
	local body=$CHAT_REQ sse="" line pid="" before="0 0" after="0 0"
	if [ "$2" = sse ]; then body=$SSE_REQ sse=-sse; fi
	case $3 in
	nginx) pid=$NGINX_PID ;;
	sidecar) pid=$SIDECAR_PID ;;
	sidecar-b) pid=$SIDECAR_B_PID ;;
	esac
	[ -z "$pid" ] || before=$(cpu_ticks "$pid")
	line=$("$tmp/latency" -url "$(url_of "$3" "$2")" -conns "$LAT_CONNS" -rate "$LAT_RATE" -duration "$LAT_DURATION" \
		-warmup "$LAT_WARMUP" -body "$body" -header "Authorization: Bearer sk-bench-not-a-key" $sse -tsv)
	[ -z "$pid" ] || after=$(cpu_ticks "$pid")
	local errs
	errs=$(cut -f2 <<<"$line")
	[ "$errs" -eq 0 ] || die "$3 $2 at a fixed rate: $errs requests failed"
	# CPU per request at this rate: every request sent, the warm-up's included, on the schedule.
	local cpu="-"
	if [ -n "$pid" ]; then
		cpu=$(awk -v b="$before" -v a="$after" -v hz="$CLK_TCK" -v rate="$LAT_RATE" \
			-v secs="$(( $(to_us "$LAT_DURATION") + $(to_us "$LAT_WARMUP") ))" 'BEGIN {
			split(b, x, " "); split(a, y, " ")
			printf "%.2f\n", (y[1] - x[1] + y[2] - x[2]) / hz * 1e6 / (rate * secs / 1e6) }')
	fi
	printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$line" "$cpu" >>"$lat_results"
	printf '  round %s  %-4s fixed %s/s %-8s service p50 %7.0f us  p99 %7.0f us  cpu/req %s us\n' "$1" "$2" "$LAT_RATE" "$3" \
		"$(cut -f6 <<<"$line")" "$(cut -f7 <<<"$line")" "$cpu" >&2
}
log "measuring at a fixed rate: $LAT_RATE requests/s over $LAT_CONNS connections, $ROUNDS rounds of $LAT_DURATION ..."
for round in $(seq "$ROUNDS"); do
	for wl in $WORKLOADS; do
		[ "$wl" != paced ] || continue # a paced stream lasts 20 gaps: no fixed rate of LAT_RATE
		for cfg in $CONFIGS; do lat_one "$round" "$wl" "$cfg"; done
	done
done
NGINX_RSS=$(rss_kib "$NGINX_PID")
SIDECAR_RSS=$(rss_kib "$SIDECAR_PID")

# --- summary ----------------------------------------------------------------------------------
# Medians over the rounds; added latency and the ratio to nginx are taken per round (same
# moment, same machine load) and then their median.
echo
echo "machine: $(nproc) cores, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(uname -r)"
echo "$($NGINX -v 2>&1 | sed 's/^nginx version: //'), $(wrk -v 2>&1 | head -1 | awk '{ print "wrk " $2 }'), $(go version | awk '{ print $3 }')"
echo "wrk -t1, $ROUNDS interleaved rounds of $DURATION, medians; latency in microseconds; CPU = the proxy process(es) utime+stime per request, user = its utime part"
echo
# median(list): the median of a space-separated list of numbers, for both summaries.
AWK_MEDIAN='
function median(list,    n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
	if (n == 0) return "-"
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
'
awk -F'\t' -v nginx_rss="$NGINX_RSS" -v sidecar_rss="$SIDECAR_RSS" -v configs="$CONFIGS" "$AWK_MEDIAN"'{
	k = $2 SUBSEP $3 SUBSEP $4
	rps[k] = rps[k] " " $5; p50[k] = p50[k] " " $6; p99[k] = p99[k] " " $7; cpu[k] = cpu[k] " " $8; usr[k] = usr[k] " " $9
	r = $1 SUBSEP $2 SUBSEP $3
	R[r SUBSEP $4 SUBSEP "rps"] = $5; R[r SUBSEP $4 SUBSEP "p50"] = $6; R[r SUBSEP $4 SUBSEP "p99"] = $7; R[r SUBSEP $4 SUBSEP "cpu"] = $8
	rounds[$1] = 1; wls[$2] = 1; conns[$3] = 1
}
END {
	printf "| workload | conns | config | req/s | p50 | p99 | p99 / nginx | added p50 | added p99 | CPU/req | user/req | CPU / nginx | ratio to nginx |\n"
	printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
	split("chat sse paced", W, " "); split("10 64", C, " "); nf = split(configs, F, " ")
	for (wi = 1; wi <= 3; wi++) for (ci = 1; ci <= 2; ci++) for (fi = 1; fi <= nf; fi++) {
		w = W[wi]; c = C[ci]; f = F[fi]; k = w SUBSEP c SUBSEP f
		if (!(k in rps)) continue
		a50 = ""; a99 = ""; ratio = ""; p99r = ""; cpur = ""
		for (rd in rounds) {
			r = rd SUBSEP w SUBSEP c
			if (!((r SUBSEP f SUBSEP "rps") in R)) continue
			a50 = a50 " " (R[r SUBSEP f SUBSEP "p50"] - R[r SUBSEP "direct" SUBSEP "p50"])
			a99 = a99 " " (R[r SUBSEP f SUBSEP "p99"] - R[r SUBSEP "direct" SUBSEP "p99"])
			ratio = ratio " " (R[r SUBSEP f SUBSEP "rps"] / R[r SUBSEP "nginx" SUBSEP "rps"])
			p99r = p99r " " (R[r SUBSEP f SUBSEP "p99"] / R[r SUBSEP "nginx" SUBSEP "p99"])
			if (f != "direct") cpur = cpur " " (R[r SUBSEP f SUBSEP "cpu"] / R[r SUBSEP "nginx" SUBSEP "cpu"])
		}
		m50 = median(a50); m99 = median(a99); mr = median(ratio)
		printf "| %s | %s | %s | %.0f | %.0f µs | %.0f µs | %.2f | %s | %s | %s | %s | %s | %.2f |\n", w, c, f, median(rps[k]), median(p50[k]), median(p99[k]),
			median(p99r), (f == "direct" ? "–" : sprintf("%+.0f µs", m50)), (f == "direct" ? "–" : sprintf("%+.0f µs", m99)),
			(f == "direct" ? "–" : sprintf("%.1f µs", median(cpu[k]))), (f == "direct" ? "–" : sprintf("%.1f µs", median(usr[k]))),
			(f == "direct" ? "–" : sprintf("%.2f", median(cpur))), mr
		if (f == "sidecar") { S[w, c, "ratio"] = mr; S[w, c, "a50"] = m50; S[w, c, "a99"] = m99; S[w, c, "p99r"] = median(p99r); S[w, c, "cpur"] = median(cpur) }
	}
	printf "\nresident memory after the load: nginx proxy (master and workers) %.1f MiB, sidecar %.1f MiB\n", nginx_rss / 1024, sidecar_rss / 1024
	printf "\ntargets (sidecar):\n"
	for (wi = 1; wi <= 2; wi++) { # chat and sse: a paced stream takes as long as its gaps
		w = W[wi]; cap_ = (w == "chat" ? 1.1 : 1.3)
		if ((w, 10, "p99r") in S) printf "  %-4s p99 at 10 connections <= 2x nginx'"'"'s: %.2fx  %s\n", w, S[w, 10, "p99r"], (S[w, 10, "p99r"] <= 2 ? "met" : "NOT met")
		for (ci = 1; ci <= 2; ci++) if ((w, C[ci], "cpur") in S)
			printf "  %-4s CPU per request at %s connections <= %.1fx nginx'"'"'s: %.2fx  %s\n", w, C[ci], cap_, S[w, C[ci], "cpur"], (S[w, C[ci], "cpur"] <= cap_ ? "met" : "NOT met")
		if ((w, 64, "ratio") in S) printf "  %-4s throughput at 64 connections >= nginx: ratio %.2f  %s\n", w, S[w, 64, "ratio"], (S[w, 64, "ratio"] >= 1 ? "met" : "NOT met")
		if ((w, 10, "a50") in S) {
			printf "  %-4s added p50 < 50 µs at 10 connections: %+.0f µs  %s\n", w, S[w, 10, "a50"], (S[w, 10, "a50"] < 50 ? "met" : "NOT met")
			printf "  %-4s added p99 < 250 µs at 10 connections: %+.0f µs  %s\n", w, S[w, 10, "a99"], (S[w, 10, "a99"] < 250 ? "met" : "NOT met")
		}
	}
}' "$results"

echo
echo "fixed rate: $LAT_RATE requests/s over $LAT_CONNS keep-alive connections (testdata/bench/latency), $ROUNDS rounds of $LAT_DURATION, medians;"
echo "service latency (from the write of the request to the last byte of the answer) in microseconds; CPU/req = the"
echo "proxy's utime+stime over every request sent at that rate, the warm-up's included (at this load every request"
echo "wakes the processes it passes through, so it is higher than at saturation, for nginx too)"
echo
awk -F'\t' -v rate="$LAT_RATE" -v conns="$LAT_CONNS" -v configs="$CONFIGS" "$AWK_MEDIAN"'{
	# round workload config requests errors rate lat50 lat99 svc50 svc99 cpu
	k = $2 SUBSEP $3
	rate_[k] = rate_[k] " " $6; s50[k] = s50[k] " " $9; s99[k] = s99[k] " " $10; cpu[k] = cpu[k] " " $11
	R[$1, $2, $3, 50] = $9; R[$1, $2, $3, 99] = $10; R[$1, $2, $3, "cpu"] = $11
	rounds[$1] = 1
}
END {
	printf "| workload | config | req/s | p50 | p99 | added p50 | added p99 | CPU/req | CPU / nginx |\n"
	printf "|---|---|---|---|---|---|---|---|---|\n"
	split("chat sse", W, " "); nf = split(configs, F, " ")
	for (wi = 1; wi <= 2; wi++) for (fi = 1; fi <= nf; fi++) {
		w = W[wi]; f = F[fi]; k = w SUBSEP f
		if (!(k in s50)) continue
		a50 = ""; a99 = ""; cpur = ""
		for (rd in rounds) {
			a50 = a50 " " (R[rd, w, f, 50] - R[rd, w, "direct", 50])
			a99 = a99 " " (R[rd, w, f, 99] - R[rd, w, "direct", 99])
			if (f != "direct" && R[rd, w, "nginx", "cpu"] > 0) cpur = cpur " " (R[rd, w, f, "cpu"] / R[rd, w, "nginx", "cpu"])
		}
		m50 = median(a50); m99 = median(a99)
		printf "| %s | %s | %.0f | %.0f µs | %.0f µs | %s | %s | %s | %s |\n", w, f, median(rate_[k]), median(s50[k]), median(s99[k]),
			(f == "direct" ? "–" : sprintf("%+.0f µs", m50)), (f == "direct" ? "–" : sprintf("%+.0f µs", m99)),
			(f == "direct" ? "–" : sprintf("%.1f µs", median(cpu[k]))), (f == "direct" ? "–" : sprintf("%.2f", median(cpur)))
		if (f == "sidecar") { S[w, 50] = m50; S[w, 99] = m99 }
		if (f == "direct") D[w] = median(s99[k])
	}
	printf "\ntargets (sidecar, at a fixed rate of %s/s over %s connections):\n", rate, conns
	for (wi = 1; wi <= 2; wi++) {
		w = W[wi]
		if (!((w, 50) in S)) continue
		printf "  %-4s added p50 < 50 µs: %+.0f µs  %s\n", w, S[w, 50], (S[w, 50] < 50 ? "met" : "NOT met")
		printf "  %-4s added p99 < 250 µs: %+.0f µs  %s (the direct path alone has p99 %.0f µs: where that is far above the\n", w, S[w, 99], (S[w, 99] < 250 ? "met" : "NOT met"), D[w]
		printf "       target, the machine'"'"'s own scheduling jitter decides p99, not the proxy)\n"
	}
}' "$lat_results"
if [ -n "${RESULTS:-}" ]; then
	cp "$results" "$RESULTS"
	cp "$lat_results" "$RESULTS.latency"
	log "per-round results: $RESULTS"
fi
