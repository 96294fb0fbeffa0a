#!/usr/bin/env bash
# Start a Ray node for Sloop stages on a plain host, by hand (the systemd units
# ray-head.service and ray-worker.service run the same commands at boot).
#
#   start-hosts.sh head NODE_IP [extra ray start arguments]
#   start-hosts.sh worker HEAD_IP:6379 [AGENTS [extra ray start arguments]]
#
# Token authentication is always on: RAY_AUTH_TOKEN must be set (the same value on
# every node and on the daemon's host); this script sets RAY_AUTH_MODE=token.
#   set -a; . /etc/sloopd/ray.env; set +a      # or: export RAY_AUTH_TOKEN=...
#
# The head runs no stage (--num-cpus 0); each worker offers AGENTS (default 4) units
# of the custom resource `agents`, one per stage running at once. RAY names the ray
# executable (default: ray on PATH, e.g. /opt/sloop/venv/bin/ray).
# Guide: docs/deploy.md, "Stages on a Ray cluster".
set -euo pipefail

usage() {
    sed -n '5,6s/^#   //p' "$0" >&2
    exit 2
}

[ $# -ge 2 ] || usage
role=$1
address=$2
shift 2

if [ -z "${RAY_AUTH_TOKEN:-}" ]; then
    echo "start-hosts.sh: RAY_AUTH_TOKEN is not set (generate one with" \
        "'openssl rand -hex 32' or 'ray get-auth-token --generate')" >&2
    exit 2
fi
export RAY_AUTH_MODE=token
ray=${RAY:-ray}

case $role in
head)
    exec "$ray" start --head --node-ip-address "$address" --port 6379 \
        --num-cpus 0 --include-dashboard false --disable-usage-stats "$@"
    ;;
worker)
    agents=${1:-4}
    if [ $# -gt 0 ]; then shift; fi
    if ! [[ $agents =~ ^[1-9][0-9]*$ ]]; then
        echo "start-hosts.sh: AGENTS must be a positive integer, not '$agents'" >&2
        exit 2
    fi
    if [ "$(id -u)" = 0 ]; then
        # As root bubblewrap makes no user namespace: agents would run as uid 0.
        echo "start-hosts.sh: warning: a worker running as root runs its agents as" \
            "root; start it as a dedicated user" >&2
    fi
    exec "$ray" start --address "$address" --resources "{\"agents\": $agents}" \
        --disable-usage-stats "$@"
    ;;
*)
    usage
    ;;
esac
