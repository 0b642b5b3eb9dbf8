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
# --tls_key of that task; its CN, TASK, is its identity: chief, ps-N,
# worker-N, anything else an observer), OUT_DIR/tokens/ROLE for ROLE in
# chief, ps, worker, observer (--auth_token_file of the tasks of that role:
# its own token and the SHA-256 of every role's), OUT_DIR/tokens/TASK for
# each task chief (written as chief-0), chief-N, ps-N, worker-N (per-task
# tokens: that task's own token and the SHA-256 of every task's token and
# the observer role's, so a token proves one task; every task of a cluster
# takes its own) and OUT_DIR/token (the legacy shared token: every role to
# whoever holds it). Without SANs a task's certificate names DNS:TASK,
# DNS:localhost and IP:127.0.0.1. An existing CA and existing tokens in
# OUT_DIR are reused; per-task files already there are rewritten to accept
# the new tasks too.
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
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
# Per-role tokens: each file holds its role's token (first line, secret) and
# the digests a daemon checks callers against, so a worker's file does not
# hold the chief's token.
mkdir -p "$out/tokens"
roles="chief ps worker observer"
declare -A tokens
for role in $roles; do
  if [ -s "$out/tokens/$role" ]; then
    tokens[$role]=$(head -n 1 "$out/tokens/$role")
  else
    tokens[$role]=$(openssl rand -hex 32)
  fi
done
for role in $roles; do
  {
    echo "${tokens[$role]}"
    echo "# psrt role tokens: this task's token above; the roles it accepts below"
    for r in $roles; do
      echo "$r sha256:$(printf '%s' "${tokens[$r]}" | openssl dgst -sha256 -r | cut -d' ' -f1)"
    done
  } > "$out/tokens/$role"
done
echo "make_certs: role tokens $out/tokens/{chief,ps,worker,observer}"

# Per-task tokens: tokens/TASK holds that task's token and accepts every
# task's token as that task (and the observer role's), never a role's, so
# a worker's token cannot speak for another worker. Tasks made earlier
# (their files are here) stay accepted.
digest() { printf '%s' "$1" | openssl dgst -sha256 -r | cut -d' ' -f1; }
task_re='^(chief|ps|worker)-(0|[1-9][0-9]*)$'
declare -A task_tokens=()
for f in "$out"/tokens/*; do
  t=${f##*/}
  if [[ $t =~ $task_re ]] && [ -s "$f" ]; then task_tokens[$t]=$(head -n 1 "$f"); fi
done
for spec in "$@"; do
  t=${spec%%=*}
  if [ "$t" = chief ]; then t=chief-0; fi
  if [[ $t =~ $task_re ]] && [ -z "${task_tokens[$t]:-}" ]; then task_tokens[$t]=$(openssl rand -hex 32); fi
done
if [ ${#task_tokens[@]} -gt 0 ]; then
  accepted=$(
    for t in $(printf '%s\n' "${!task_tokens[@]}" | sort -V); do echo "$t sha256:$(digest "${task_tokens[$t]}")"; done
    echo "observer sha256:$(digest "${tokens[observer]}")"
  )
  for t in "${!task_tokens[@]}"; do
    {
      echo "${task_tokens[$t]}"
      echo "# psrt per-task tokens: $t's token above; the tasks (and observers) it accepts below"
      echo "$accepted"
    } > "$out/tokens/$t"
  done
  echo "make_certs: per-task tokens $out/tokens/{$(printf '%s\n' "${!task_tokens[@]}" | sort -V | paste -sd,)}"
fi
chmod 644 "$out/ca.pem" "$out"/*.pem
