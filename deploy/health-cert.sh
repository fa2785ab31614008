#!/usr/bin/env bash
# Makes health.pem and health.key in DIR (default: deploy/pki/, beside this script) from the
# CA the TLS quick start made there (docs/tls.md: ca.pem, ca.key): the client certificate
# of deploy/compose-mtls.yaml's health checks.
#
# Under mutual TLS the health check must present a certificate, and the daemon's own
# (server.pem) is for server authentication only. This one is for client authentication
# and names no caller of [callers], so a connection made with it may ask grpc.health.v1
# and nothing else: every other call on it is UNAUTHENTICATED. The daemons' containers
# thus hold no caller's key.
#
#   bash deploy/health-cert.sh [DIR]
set -euo pipefail

dir=${1:-"$(dirname "$0")/pki"}
cd "$dir"
for f in ca.pem ca.key; do
  [[ -f $f ]] || { echo "$dir/$f not found: run the TLS quick start (docs/tls.md) first" >&2; exit 1; }
done
[[ ! -e health.key ]] || { echo "$dir/health.key exists: remove it to make a new one" >&2; exit 1; }

(umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out health.key)
openssl req -new -key health.key -subj "/O=Example/CN=healthcheck.portcullis.internal" |
  openssl x509 -req -CA ca.pem -CAkey ca.key -sha256 -days 90 \
    -set_serial "0x$(openssl rand -hex 16)" \
    -extfile <(printf '%s\n' \
      "basicConstraints = critical, CA:FALSE" \
      "keyUsage = critical, digitalSignature" \
      "extendedKeyUsage = clientAuth" \
      "subjectKeyIdentifier = hash" \
      "authorityKeyIdentifier = keyid:always" \
      "subjectAltName = DNS:healthcheck.portcullis.internal") \
    -out health.pem
chmod 0644 health.pem
openssl verify -CAfile ca.pem -purpose sslclient health.pem
