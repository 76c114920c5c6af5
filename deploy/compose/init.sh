#!/bin/sh
# compose.yaml's `init` service (runs once before the nodes, as the image's non-root user):
#  - a CA and the node, worker and admin certificates (`schedd certs init`) in the pki volume,
#    which only this service mounts: the CA key never reaches a node;
#  - to each service's own volume, only what it needs (TLS/<service>/, one volume each in
#    compose.yaml): a node the CA certificate and its own pair, the worker the CA certificate
#    and its own pair (its jobs run as its uid: an admin key there would be theirs), the admin
#    volume (setup and schedctl) the CA certificate and the admin pairs;
#  - the cluster secret (`schedd gen-secret`, 0600) in the secret volume, for the nodes only.
# Nothing is remade on a later start (existing files are kept), so `docker compose up` again
# keeps the cluster's identity. The directories can be moved with the variables below (the
# packaging test runs this script outside a container that way).
set -eu
PKI=${SCHEDD_PKI_DIR:-/etc/schedd/pki}
TLS=${SCHEDD_TLS_DIR:-/etc/schedd/tls}
SECRET=${SCHEDD_SECRET_DIR:-/etc/schedd/secret}
NODES=${SCHEDD_NODES:-n1,n2,n3}
WORKERS=${SCHEDD_WORKERS:-w1}
ADMINS=${SCHEDD_ADMINS:-admin}
umask 077

if [ ! -f "$PKI/ca.pem" ]; then
  # Each node's certificate names its service (what peers, workers and the HEALTHCHECK dial);
  # localhost and 127.0.0.1 too, for schedctl through a port published on the host.
  set --
  for n in $(echo "$NODES" | tr ',' ' '); do set -- "$@" --hosts "$n=$n"; done
  schedd certs init --dir "$PKI" --nodes "$NODES" "$@" --hosts localhost,127.0.0.1 \
    --workers "$WORKERS" --admins "$ADMINS"
fi
# give SERVICE FILE...: FILE of the pki volume (and the CA certificate) to TLS/SERVICE only
give() {
  dest="$TLS/$1"; shift
  mkdir -p "$dest"
  for f in ca.pem "$@"; do cp -p "$PKI/$f" "$dest/"; done
}
for n in $(echo "$NODES" | tr ',' ' '); do give "$n" "node-$n.pem" "node-$n-key.pem"; done
for w in $(echo "$WORKERS" | tr ',' ' '); do give "$w" "worker-$w.pem" "worker-$w-key.pem"; done
set --
for a in $(echo "$ADMINS" | tr ',' ' '); do set -- "$@" "admin-$a.pem" "admin-$a-key.pem"; done
give admin "$@"
[ -f "$SECRET/cluster.secret" ] || schedd gen-secret --out "$SECRET/cluster.secret"
echo "init: each service's certificates in $TLS/<service>, cluster secret in $SECRET (the CA key stays in $PKI)"
