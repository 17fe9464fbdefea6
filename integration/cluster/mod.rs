//! msgproxy in front of several servers (issue 22, docs/CLUSTERS.md), on real clusters started by
//! `scripts/mariadb-cluster.sh`: a primary with a GTID replica that a test fails over as a
//! failover tool would, and a 3-node Galera cluster with a proxy on each of two nodes;
//! `stream_groups` moves event-stream groups between their servers by GTID.

mod galera;
mod harness;
mod replica;
mod stream_groups;
mod switch;
