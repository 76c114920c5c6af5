#!/bin/sh
# compose.yaml's `setup` service: once the cluster has a leader, a worker token for the worker
# (policy compose-workers: serve every pool and team, 8 slots), kept 0600 in the creds volume
# as worker.token, which the worker's context file (worker-context.toml) names. It connects as
# the admin certificate (SCHEDD_CONTEXT=admin-context.toml), which holds the management policy.
# A token made before is kept. SCHEDD_CREDS_DIR moves the output (the packaging test uses it).
set -eu
CREDS=${SCHEDD_CREDS_DIR:-/etc/schedd/creds}
POLICY=${SCHEDD_WORKER_POLICY:-compose-workers}
SLOTS=${SCHEDD_WORKER_SLOTS:-8}
[ -s "$CREDS/worker.token" ] && { echo "setup: $CREDS/worker.token exists"; exit 0; }
umask 077

tries=0
until schedctl acl policy create "$POLICY" --rule 'pool:*=serve' --rule 'team:*=serve' \
    --description "compose.yaml's workers serve every pool and team"; do
  tries=$((tries + 1))
  [ "$tries" -lt 60 ] || { echo "setup: no leader after $tries tries" >&2; exit 1; }
  sleep 2                        # the nodes are electing a leader
done
schedctl -o json acl token create --worker --policy "$POLICY" --max-slots "$SLOTS" \
  --description "compose.yaml's worker" > "$CREDS/worker.json"
python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["secret"])' "$CREDS/worker.json" \
  > "$CREDS/worker.token.new"
rm -f "$CREDS/worker.json"
mv "$CREDS/worker.token.new" "$CREDS/worker.token"
echo "setup: worker token in $CREDS/worker.token"
