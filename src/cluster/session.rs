//! One node's membership, session after session: connect to etcd, take a lease, register
//! (`nodes/<id>` under the lease), campaign to coordinate and follow the cluster's keys, and
//! renew the lease a third of its length apart.
//!
//! A session ends when the node can no longer be sure its lease lives: etcd said it ended, or
//! no renewal was confirmed within the lease's length counted from when the last confirmed one
//! was *sent* (etcd counts from when it received it, which is later, so the node gives up
//! first). That is the fence: the node drops its coordinator role and the tasks acting on its
//! membership, records a `fenced` event, and starts a new session under a new lease (a process
//! stopped with SIGSTOP past its lease finds this out as soon as it runs again). A clean stop
//! revokes the lease, so the others need not wait for it to end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, PutOptions};
use tokio::sync::watch;
use tracing::{info, warn};

use super::keys::{EventRecord, Keys, NodeRecord, RECORD_VERSION};
use super::{election, picture};
use crate::config::ClusterConfig;
use crate::metrics;
use crate::status::{ClusterEvent, Status};

/// Why a session ended.
enum Ended {
    /// The lease ended, or may have: the node joins again under a new one.
    Fenced(String),
    /// etcd could not be reached to start one.
    Unreachable(String),
    /// A clean stop asked for it.
    Left,
}

/// Runs sessions until `left` says to stop.
pub async fn run(config: ClusterConfig, status: Arc<Status>, mut left: watch::Receiver<bool>) {
    let keys = Keys::new(&config.prefix);
    // Events this node could not write while it had no session (a fence), written by the next.
    let mut pending: Vec<EventRecord> = Vec::new();
    let mut unreachable_logged = false;
    loop {
        let ended = session(&config, &keys, &status, &mut pending, &mut left).await;
        metrics::CLUSTER_COORDINATOR.set(0);
        match ended {
            Ended::Left => return,
            Ended::Fenced(why) => {
                unreachable_logged = false;
                metrics::CLUSTER_FENCED_TOTAL.inc();
                metrics::CLUSTER_VNODES.set(0);
                warn!(node = %config.node_id, "fenced: {why}; no longer acting as a member, joining again");
                let event = event(&config.node_id, "fenced", &why);
                if let Some(picture) = status.cluster.lock().as_mut() {
                    for node in picture.nodes.iter_mut().filter(|n| n.node_id == config.node_id) {
                        node.state = "fenced".into();
                        node.role = "worker".into();
                        node.vnodes.clear();
                    }
                    picture.events.push(ClusterEvent::from(&event));
                }
                pending.push(event);
            }
            Ended::Unreachable(why) => {
                if !unreachable_logged {
                    warn!(endpoints = ?config.endpoints, "etcd unreachable: {why}; retrying");
                    unreachable_logged = true;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    () = async { let _ = left.wait_for(|l| *l).await; } => return,
                }
            }
        }
    }
}

/// An event that happens now.
fn event(node_id: &str, kind: &str, detail: &str) -> EventRecord {
    EventRecord::new(chrono::Utc::now().timestamp_micros(), node_id, kind, detail)
}

/// Writes `event` (kept after the node's lease, unlike its registration).
pub async fn record(client: &mut Client, keys: &Keys, event: &EventRecord) -> Result<(), etcd_client::Error> {
    let value = serde_json::to_vec(event).expect("an event serializes");
    client.put(keys.event(event.at_micros, &event.node_id), value, None).await.map(|_| ())
}

/// Calls etcd with a deadline: a call that hangs (etcd stopped mid-call) must not hold a
/// session past its lease.
async fn within<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {limit:?}")),
    }
}

async fn session(
    config: &ClusterConfig,
    keys: &Keys,
    status: &Arc<Status>,
    pending: &mut Vec<EventRecord>,
    left: &mut watch::Receiver<bool>,
) -> Ended {
    if *left.borrow() {
        return Ended::Left;
    }
    let lease_length = config.lease;
    let options = ConnectOptions::new()
        .with_connect_timeout(lease_length)
        .with_keep_alive(lease_length / 3, lease_length)
        .with_keep_alive_while_idle(true);
    let mut client = match within(lease_length, Client::connect(&config.endpoints, Some(options))).await {
        Ok(c) => c,
        Err(e) => return Ended::Unreachable(e),
    };
    let granted_at = Instant::now();
    let lease = match within(lease_length, client.lease_grant(lease_length.as_secs() as i64, None)).await {
        Ok(l) => l.id(),
        Err(e) => return Ended::Unreachable(e),
    };
    let mut valid_until = granted_at + lease_length;
    let registration = NodeRecord {
        version: RECORD_VERSION,
        node_id: config.node_id.clone(),
        postgres: config.advertise.clone(),
        exchange: config.exchange.clone(),
        joined_at_micros: chrono::Utc::now().timestamp_micros(),
        release: env!("CARGO_PKG_VERSION").into(),
    };
    let value = serde_json::to_vec(&registration).expect("a node record serializes");
    let put = client.put(keys.node(&config.node_id), value, Some(PutOptions::new().with_lease(lease)));
    if let Err(e) = within(lease_length, put).await {
        return Ended::Unreachable(e);
    }
    pending.push(event(&config.node_id, "joined", &format!("at {}, lease {lease:x}", config.advertise)));
    for e in pending.drain(..) {
        if let Err(e) = within(lease_length, record(&mut client, keys, &e)).await {
            warn!("recording a cluster event: {e}");
        }
    }
    info!(node = %config.node_id, lease = format!("{lease:x}"), "joined the cluster");
    let (mut keeper, mut renewals) = match within(lease_length, client.lease_keep_alive(lease)).await {
        Ok(k) => k,
        Err(e) => return Ended::Fenced(format!("renewing the lease: {e}")),
    };
    // What acts on this membership; aborted when it ends.
    let tasks = [
        tokio::spawn(picture::follow(client.clone(), keys.clone(), Arc::clone(status), config.node_id.clone())),
        tokio::spawn(election::campaign(client.clone(), keys.clone(), config.node_id.clone(), lease)),
    ];
    let ended = loop {
        let sent = Instant::now();
        if sent >= valid_until {
            break Ended::Fenced(format!("no renewal of lease {lease:x} confirmed for {lease_length:?}"));
        }
        let renewed = async {
            keeper.keep_alive().await?;
            renewals.message().await
        };
        let renewed = tokio::select! {
            renewed = tokio::time::timeout(valid_until - sent, renewed) => renewed,
            () = async { let _ = left.wait_for(|l| *l).await; } => {
                for task in &tasks {
                    task.abort();
                }
                let _ = within(Duration::from_secs(1), record(&mut client, keys, &event(&config.node_id, "stopped", "a clean stop: its lease revoked"))).await;
                revoke(&mut client, lease).await;
                info!(node = %config.node_id, "left the cluster");
                return Ended::Left;
            }
        };
        match renewed {
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                valid_until = sent + Duration::from_secs(answer.ttl() as u64).min(lease_length);
            }
            Ok(Ok(Some(_))) => break Ended::Fenced(format!("etcd says lease {lease:x} has ended")),
            Ok(Ok(None)) | Ok(Err(_)) => {
                // The renewal stream broke (etcd restarted, a connection dropped): open a new
                // one on the same lease while it may still live.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let remaining = valid_until.saturating_duration_since(Instant::now());
                match within(remaining.max(Duration::from_millis(1)), client.lease_keep_alive(lease)).await {
                    Ok((k, r)) => {
                        keeper = k;
                        renewals = r;
                    }
                    Err(_) => continue,
                }
                continue;
            }
            Err(_) => continue,
        }
        tokio::time::sleep((lease_length / 3).saturating_sub(sent.elapsed())).await;
    };
    for task in &tasks {
        task.abort();
    }
    ended
}

/// Revokes `lease` (a clean stop): etcd deletes the node's key and its candidacy at once.
pub async fn revoke(client: &mut Client, lease: i64) {
    let _ = within(Duration::from_secs(1), client.lease_revoke(lease)).await;
}
