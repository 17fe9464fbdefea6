#!/bin/bash
# Entrypoint and healthcheck of the Galera nodes in docker-compose.yml's `cluster` profile (mounted into the
# official mariadb:10.11 image, which runs it with bash).
#
#   galera-node.sh start [mariadbd options]   start this node through the image's own entrypoint
#   galera-node.sh healthy                    exit 0 when this node is synced and ready
#
# `start` adds --wsrep-new-cluster (bootstrap a new cluster) only on the node whose service sets
# MSGPROXY_GALERA_MAY_BOOTSTRAP=1, and only when that is safe:
#   - no peer (MSGPROXY_GALERA_PEERS) answers as part of a running cluster, since bootstrapping beside one
#     makes two clusters with diverging data; and
#   - this node has no cluster state yet (a new volume: no grastate.dat), or Galera itself marked it the last
#     node to leave the cluster (safe_to_bootstrap: 1, so it has every transaction).
# Otherwise the node joins. After all nodes were killed at once none is safe to bootstrap: Galera's pc.recovery
# (on by default) re-forms the cluster when they all come back; if it cannot, see docs/CLUSTERS.md.
set -euo pipefail

datadir=/var/lib/mysql

note() { echo "galera-node: $*" >&2; }

# Prints "<wsrep_local_state>,<wsrep_ready>" of the server this container runs (root over the socket).
local_state() {
    mariadb -uroot -N -B -e "SELECT GROUP_CONCAT(VARIABLE_VALUE ORDER BY VARIABLE_NAME)
        FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('wsrep_local_state','wsrep_ready')"
}

# Whether the node at $1 answers and belongs to a primary component (a working cluster).
peer_in_cluster() {
    local status
    status=$(mariadb --connect-timeout=3 -h "$1" -uroot -N -B -e "SELECT VARIABLE_VALUE
        FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='wsrep_cluster_status'" 2>/dev/null) || return 1
    [ "$status" = Primary ]
}

may_bootstrap() {
    [ "${MSGPROXY_GALERA_MAY_BOOTSTRAP:-0}" = 1 ] || return 1
    local peer
    for peer in ${MSGPROXY_GALERA_PEERS:-}; do
        if peer_in_cluster "$peer"; then
            note "$peer is in a running cluster: joining it"
            return 1
        fi
    done
    if [ ! -e "$datadir/grastate.dat" ]; then
        note "no cluster state yet: bootstrapping a new cluster"
        return 0
    fi
    if grep -q '^safe_to_bootstrap: *1' "$datadir/grastate.dat"; then
        note "this node was the last to leave the cluster: bootstrapping it again"
        return 0
    fi
    note "not bootstrapping: this node was not the last to leave the cluster (grastate.dat says so); joining"
    return 1
}

case "${1:-}" in
healthy)
    # 4 = Synced; a joining or donating node is not, and msgproxy does not use it either.
    [ "$(local_state)" = "4,ON" ]
    ;;
start)
    shift
    if may_bootstrap; then
        set -- "$@" --wsrep-new-cluster
    fi
    exec docker-entrypoint.sh mariadbd "$@"
    ;;
*)
    echo "usage: $0 start [mariadbd options] | healthy" >&2
    exit 2
    ;;
esac
