#!/usr/bin/env bash
# The daemon's CPU instructions per `RecordAttempt`, counted by valgrind's callgrind:
# a count, not a time, so it repeats within about 1 % whatever else the machine does
# (docs/performance.md, "Daemon CPU per call").
#
#   [CALL=record|health] benches/instructions_per_call.sh [BINARY] [redis|embedded] [CALLS] [REALM_TOML]
#
# BINARY defaults to target/release/portcullis (`cargo build --release`), the store to
# redis (a private redis-server on a free port), CALLS to 2000; REALM_TOML is added
# after `[realms.default]` (for example $'[realms.default.candidate]\nmax_failures = 3'
# for a candidate policy's cost). The daemon runs under
# callgrind with its default log level; h2load (Debian's nghttp2-client) sends 400
# warm-up calls, then the counters are zeroed, CALLS calls are sent (4 connections x 16
# streams, one hot account, as the throttle bench's load-tool rows), and the counters
# dumped. Prints one line: instructions a call, the daemon's whole process (its runtime,
# the embedded store's writer thread, timers) divided by the calls.
#
# CALLGRIND_KEEP=PATH keeps the dump of the measured calls at PATH, for
# `callgrind_annotate --inclusive=yes PATH` (where the instructions go).
#
# CALL=health sends the standard gRPC health check (`grpc.health.v1.Health/Check`, an
# empty request; the load-tool rows' HEALTH_CHECK_PATH in tests/support) instead of
# `RecordAttempt`, through the same server and layers: what the server stack costs a
# call that does none of the daemon's own work, the floor under every RPC's count.
#
# h2load counts a call as succeeded on HTTP status 200; it does not read the gRPC status
# in the trailers. The count is of calls answered: the throttle bench's load tool is
# the one that checks every `grpc-status`.
#
# Needs valgrind, h2load and redis-server. Under valgrind the CPU has no SHA extensions,
# so SHA-256 (the account key's HMAC) counts its portable code's instructions, about
# 13,500 a call, which a CPU with them spends far fewer cycles on.
set -euo pipefail

case "${1:-}" in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
binary=${1:-target/release/portcullis}
store=${2:-redis}
calls=${3:-2000}
realm_toml=${4:-}
case "${CALL:-record}" in
  record) method=portcullis.v1.Governor/RecordAttempt name=RecordAttempt ;;
  health) method=grpc.health.v1.Health/Check name=Health/Check ;;
  *) echo "CALL is record or health" >&2; exit 2 ;;
esac
for tool in valgrind callgrind_control h2load redis-server python3; do
  command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 2; }
done
[ -x "$binary" ] || { echo "no daemon binary at $binary (cargo build --release)" >&2; exit 2; }

dir=$(mktemp -d)
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null || true
  if [ -f "$dir/redis.pid" ]; then
    redis_pid=$(cat "$dir/redis.pid")
    kill "$redis_pid" 2>/dev/null || true
    # Gone before this script is: nothing of it outlives the run.
    for _ in $(seq 1 50); do kill -0 "$redis_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)

if [ "$store" = redis ]; then
  redis_port=$(free_port)
  redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
  store_lines="redis_url = \"redis://127.0.0.1:$redis_port\"
key_check_claim_wait = \"0s\""
else
  store_lines="data_dir = \"$dir/data\""
fi
cat >"$dir/portcullis.toml" <<EOF
listen = "127.0.0.1:$port"
shutdown_delay = "0s"
[telemetry]
admin_listen = ""
[store]
$store_lines
operation_timeout = "10s"
[realms.default]
$realm_toml
EOF

# One gRPC frame: RecordAttemptRequest { account { realm "default", identifier
# "hot@example.com" } }, protobuf-encoded, after the 5-byte gRPC message header; for
# CALL=health, HealthCheckRequest { service "" }, which encodes to no bytes.
python3 - "$dir/frame" "${CALL:-record}" <<'EOF'
import sys
account = b"\x0a\x07default" + b"\x12\x0fhot@example.com"
message = (b"\x0a" + bytes([len(account)]) + account) if sys.argv[2] == "record" else b""
open(sys.argv[1], "wb").write(b"\x00" + len(message).to_bytes(4, "big") + message)
EOF

# A throwaway secret: the count is the same for any.
PORTCULLIS_KEY_SECRET=instructions-per-call-0123456789abcdef \
  valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" \
  "$binary" serve --config "$dir/portcullis.toml" 2>"$dir/daemon.log" &
daemon_pid=$!

load() {
  h2load -n "$1" -c "${2:-4}" -m 16 -d "$dir/frame" -H 'content-type: application/grpc' \
    -H 'te: trailers' "http://127.0.0.1:$port/$method"
}
# The daemon's own lines, when it does not answer: why it did not.
daemon_failed() {
  echo "the daemon did not answer every call; its log:" >&2
  tail -n 20 "$dir/daemon.log" >&2
  exit 1
}
up=
for _ in $(seq 1 120); do
  load 1 1 2>/dev/null | grep -q " 1 succeeded" && { up=1; break; }
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 1
done
[ -n "$up" ] || daemon_failed
load 400 >/dev/null
callgrind_control -z "$daemon_pid" >/dev/null 2>&1
load "$calls" >"$dir/load.txt"
callgrind_control -d "$daemon_pid" >/dev/null 2>&1
grep -q "$calls succeeded" "$dir/load.txt" || { cat "$dir/load.txt" >&2; daemon_failed; }

[ -n "${CALLGRIND_KEEP:-}" ] && cp "$dir/callgrind.out.1" "$CALLGRIND_KEEP"
instructions=$(awk '/^summary:/ { print $2 }' "$dir/callgrind.out.1")
echo "$(basename "$binary") $store: $((instructions / calls)) instructions a $name ($instructions over $calls calls)"
