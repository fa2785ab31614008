#!/usr/bin/env bash
# Resident memory of the daemon under a Verify flood: h2load, 100 connections x 100
# streams (10,000 in flight), 100,000 calls, nearly all refused by the CPU budget.
# usage: benches/verify_flood_memory.sh BINARY LABEL [extra TOML]
#   BINARY  a release build of portcullis (cargo build --release; target/release/portcullis)
# Prints the resident memory at rest, the peak during the flood (sampled every 50 ms from
# /proc/PID/status) and 5 s after it ended. Needs h2load (nghttp2-client) and python3.
set -euo pipefail
BIN=$1; LABEL=$2; EXTRA=${3:-}
D=$(mktemp -d); PORT=$((20000 + RANDOM % 20000))
# The request body: gRPC frame (0, 4-byte length) around a prost-encoded VerifyRequest
# {account {realm "default", identifier "flood@example.com"}, password "guess", client_key "10.0.0.1"}.
python3 - "$D/verify.bin" <<'PY'
import struct, sys
def varint(n):
    out = b''
    while True:
        b, n = n & 0x7f, n >> 7
        if n: out += bytes([b | 0x80])
        else: return out + bytes([b])
def field(num, data): return varint(num << 3 | 2) + varint(len(data)) + data
msg = field(1, field(1, b'default') + field(2, b'flood@example.com')) + field(2, b'guess') + field(4, b'10.0.0.1')
open(sys.argv[1], 'wb').write(b'\x00' + struct.pack('>I', len(msg)) + msg)
PY
# No admin listener and no shutdown delay: back-to-back runs must not meet a previous
# daemon still holding the default admin port.
printf 'listen = "127.0.0.1:%s"\nshutdown_delay = "0s"\n[telemetry]\nadmin_listen = ""\n[store]\ndata_dir = "%s/data"\n%s\n' "$PORT" "$D" "$EXTRA" > "$D/p.toml"
RUST_LOG=warn "$BIN" serve --config "$D/p.toml" 2>"$D/log" & PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 100); do ss -ltn | grep -q ":$PORT " && break; sleep 0.1; done
sleep 1
rss() { awk '/VmRSS/ {print $2}' /proc/$PID/status; }
IDLE=$(rss)
( while kill -0 $PID 2>/dev/null; do rss; sleep 0.05; done ) > "$D/samples" & SAMPLER=$!
h2load -n 100000 -c 100 -m 100 -t 2 -d "$D/verify.bin" -H "content-type: application/grpc" \
  -H "te: trailers" "http://127.0.0.1:$PORT/portcullis.v1.Governor/Verify" > "$D/h2" 2>&1 || true
sleep 5
AFTER=$(rss)
kill $SAMPLER 2>/dev/null || true
PEAK=$(sort -n "$D/samples" | tail -1)
echo "$LABEL rest=${IDLE}KiB peak=${PEAK}KiB after_5s=${AFTER}KiB | $(grep -E '^requests:' "$D/h2") | load $(cut -d' ' -f1-3 /proc/loadavg)"
