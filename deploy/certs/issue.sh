#!/usr/bin/env bash
# Issues the certificates of a deployment with openssl: one private CA and,
# signed by it, the servers' certificates (MySQL, Redis, Kafka) and those of
# room-service's gRPC (server, peer and the gateway's client certificate).
# For a staging cluster or a self-managed one; a platform CA (cert-manager,
# a managed database's CA) replaces it as long as the names below match.
#
#   deploy/certs/issue.sh [OUT_DIR] [NAMESPACE] [INFRA_NAMESPACE]
#
# Defaults: deploy/certs/out, hyapp-room, hyapp-infra. Existing files are kept
# (the CA is not re-issued under a running deployment); delete OUT_DIR to
# start over. Output (PEM; keys are PKCS#8, mode 0600) is in deploy/README.md.
set -euo pipefail

out=${1:-"$(dirname "$0")/out"}
ns=${2:-hyapp-room}
infra=${3:-hyapp-infra}
days=${DAYS:-825}
mkdir -p "$out"
cd "$out"

if [ ! -f ca.key ]; then
  openssl req -x509 -newkey rsa:3072 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=hyapp-room private CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign"
  chmod 0600 ca.key
fi

# issue NAME CN USAGE SAN...: NAME.key and NAME.crt signed by the CA.
# USAGE is serverAuth, clientAuth or both.
issue() {
  local name=$1 cn=$2 usage=$3
  shift 3
  [ -f "$name.crt" ] && return 0
  local sans
  sans=$(printf 'DNS:%s,' "$@")
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "/CN=$cn"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -out "$name.crt" -days "$days" -extfile <(printf '%s\n' \
      "basicConstraints=critical,CA:FALSE" \
      "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=$usage" \
      "subjectAltName=${sans%,}")
  rm -f "$name.csr"
  chmod 0600 "$name.key"
}

svc="$infra.svc.cluster.local"
# The infrastructure: the names the ConfigMaps dial (verify_identity).
issue mysql mysql serverAuth "mysql.$svc" "mysql.$infra.svc" mysql
issue redis redis serverAuth "redis.$svc" "redis.$infra.svc" redis
issue kafka kafka serverAuth "kafka.$svc" "kafka.$infra.svc" kafka "*.kafka.$svc"

# room-service's gRPC: the Service name the gateway dials, and the peers'
# names (a headless Service room-service-peers) the pods forward to. Its
# certificate serves and, for forwarding, identifies the pod as a client.
issue room-service room-service serverAuth,clientAuth \
  "room-service.$ns.svc.cluster.local" "room-service.$ns.svc" room-service \
  "*.room-service-peers.$ns.svc.cluster.local" "*.room-service-peers.$ns.svc"
# The gateway's client certificate (CN and SAN `gateway`).
issue gateway gateway clientAuth gateway

echo "issued into $out:" >&2
ls -1 "$out" >&2
