#!/usr/bin/env bash
# Makes a test CA and one certificate per task for psrt's mutual TLS, and a
# shared token, with openssl. For tests and first deployments; production
# clusters should use their own PKI (cert-manager, Vault, ...).
#
#   deploy/make_certs.sh OUT_DIR TASK[=SAN,SAN...] ...
#   deploy/make_certs.sh certs chief ps-0 ps-1 worker-0 worker-1
#   deploy/make_certs.sh certs ps-0=DNS:ps-0.psrt.svc,IP:10.0.0.5
#
# Writes OUT_DIR/ca.pem (trust this everywhere: --tls_ca), OUT_DIR/ca.key
# (keep it off the cluster), OUT_DIR/TASK.pem and TASK.key (--tls_cert,
# --tls_key of that task) and OUT_DIR/token (--auth_token_file). Without
# SANs a task's certificate names DNS:TASK, DNS:localhost and IP:127.0.0.1.
# An existing CA in OUT_DIR is reused, so tasks can be added later.
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
out=$1
shift
command -v openssl >/dev/null || { echo "make_certs: openssl not found (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$out"
umask 077

if [ ! -f "$out/ca.pem" ] || [ ! -f "$out/ca.key" ]; then
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$out/ca.key" -out "$out/ca.pem" -days 3650 -subj "/CN=psrt cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  echo "make_certs: new CA $out/ca.pem"
fi

for spec in "$@"; do
  task=${spec%%=*}
  if [ "$spec" = "$task" ]; then
    sans="DNS:$task,DNS:localhost,IP:127.0.0.1"
  else
    sans=${spec#*=}
  fi
  case "$task" in
    ""|*/*|.*) echo "make_certs: bad task name '$task'" >&2; exit 2 ;;
  esac
  ext=$(mktemp)
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n' "$sans" > "$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$out/$task.key" -out "$out/$task.csr" -subj "/CN=$task" 2>/dev/null
  openssl x509 -req -in "$out/$task.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial \
    -out "$out/$task.pem" -days 825 -extfile "$ext" 2>/dev/null
  rm -f "$ext" "$out/$task.csr"
  echo "make_certs: $out/$task.pem ($sans)"
done

if [ ! -f "$out/token" ]; then
  openssl rand -hex 32 > "$out/token"
  echo "make_certs: shared token $out/token"
fi
chmod 644 "$out/ca.pem" "$out"/*.pem
