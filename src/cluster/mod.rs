//! Cluster mode's control plane (issue 46, ADR 38): several Weir processes, one etcd.
//!
//! Everything the nodes agree on is decided through etcd, never by a protocol of our own:
//! - **Membership** ([`session`]): a node holds an etcd lease and a key under it
//!   (`nodes/<id>`); a node etcd stops hearing from is gone when its lease ends.
//! - **The coordinator** ([`election`]): nodes campaign with etcd's election API under their
//!   lease; the elected one assigns vnodes. Its writes are transactions guarded by its leader
//!   key, so a deposed coordinator's write changes nothing.
//! - **Vnode assignment** ([`assignment`], pure): every vnode to one live node, balanced, moving
//!   as few as possible when nodes come and go; its etcd revision is the fencing token work
//!   done under it will carry.
//! - **Fencing**: a node that has not had its lease renewed for the lease's length assumes it
//!   is gone (as etcd may already have decided), stops acting as a member, and joins again
//!   under a new lease ([`session`]).
//! - **The picture** ([`picture`]): every node follows the cluster's keys with a watch and keeps
//!   what it sees in `Status::cluster`, which `weir_catalog.cluster_nodes` and `cluster_events`
//!   show on any node.
//!
//! What is not here yet: views do not run across nodes (no network exchange, no global
//! checkpoint), so in cluster mode the frontend refuses statements that would start streaming
//! work on one node alone (`frontend::cluster_gate`). Started by the server when `--cluster`
//! is given ([`Cluster::start`]); without it nothing here runs.

pub mod assignment;
pub mod election;
pub mod keys;
pub mod picture;
pub mod session;

use std::sync::Arc;

use tokio::sync::watch;
use tracing::warn;

use crate::config::ClusterConfig;
use crate::status::{ClusterPicture, Status};

/// This node's membership, running in the background until [`Cluster::leave`].
pub struct Cluster {
    leave: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Cluster {
    /// Joins the cluster in the background: the node registers, campaigns and follows the
    /// cluster's keys, and joins again whenever its lease ends. An etcd that cannot be reached
    /// is retried (logged, and shown in `weir_catalog.cluster_events` once reached).
    pub fn start(config: ClusterConfig, status: Arc<Status>) -> Cluster {
        *status.cluster.lock() = Some(ClusterPicture { this_node: config.node_id.clone(), ..Default::default() });
        let (leave, left) = watch::channel(false);
        let task = tokio::spawn(session::run(config, status, left));
        Cluster { leave, task }
    }

    /// Leaves the cluster at a clean stop: the lease is revoked, so the others take this node's
    /// vnodes at once instead of a lease's length later.
    pub async fn leave(self) {
        let _ = self.leave.send(true);
        if tokio::time::timeout(std::time::Duration::from_secs(3), self.task).await.is_err() {
            warn!("leaving the cluster took over 3 s: the lease ends by itself");
        }
    }
}
