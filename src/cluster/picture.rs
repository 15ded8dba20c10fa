//! The cluster as this node sees it: every key under the cluster's prefix, listed once and
//! then followed with an etcd watch (listed again whenever the watch breaks), turned into the
//! [`ClusterPicture`] that `weir_catalog.cluster_nodes` and `cluster_events` show.
//!
//! Run by `session` for the length of one membership session.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use tracing::debug;

use super::keys::{AssignmentRecord, EventRecord, Key, Keys, NodeRecord};
use crate::metrics;
use crate::status::{ClusterEvent, ClusterNode, ClusterPicture, Status};

/// Events a picture holds, newest last.
const EVENTS_SHOWN: usize = 200;

/// A key's value and creation revision.
type Kept = BTreeMap<String, (Vec<u8>, i64)>;

/// Follows the cluster's keys into `status` until aborted.
pub async fn follow(mut client: Client, keys: Keys, status: Arc<Status>, this_node: String) {
    loop {
        if let Err(e) = follow_once(&mut client, &keys, &status, &this_node).await {
            debug!("following the cluster's keys: {e}; listing them again");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn follow_once(client: &mut Client, keys: &Keys, status: &Status, this_node: &str) -> Result<(), String> {
    let listed = client.get(keys.prefix(), Some(GetOptions::new().with_prefix())).await.map_err(|e| e.to_string())?;
    let revision = listed.header().map_or(0, |h| h.revision());
    let mut kept: Kept = listed
        .kvs()
        .iter()
        .filter_map(|kv| Some((kv.key_str().ok()?.to_string(), (kv.value().to_vec(), kv.create_revision()))))
        .collect();
    publish(&kept, keys, status, this_node);
    let watch = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
    let mut stream = client.watch(keys.prefix(), Some(watch)).await.map_err(|e| e.to_string())?;
    while let Some(answer) = stream.message().await.map_err(|e| e.to_string())? {
        if answer.canceled() {
            return Err(format!("watch cancelled: {}", answer.cancel_reason()));
        }
        for event in answer.events() {
            let Some(kv) = event.kv() else { continue };
            let Ok(key) = kv.key_str() else { continue };
            match event.event_type() {
                EventType::Put => {
                    kept.insert(key.to_string(), (kv.value().to_vec(), kv.create_revision()));
                }
                EventType::Delete => {
                    kept.remove(key);
                }
            }
        }
        publish(&kept, keys, status, this_node);
    }
    Err("the watch ended".into())
}

/// Makes the picture from the kept keys and hands it to `status`.
fn publish(kept: &Kept, keys: &Keys, status: &Status, this_node: &str) {
    let picture = picture_of(kept, keys, this_node);
    let mine = picture.nodes.iter().find(|n| n.node_id == this_node);
    let vnodes: usize = mine.map_or(0, |n| n.vnodes.iter().map(|(a, b)| (b - a + 1) as usize).sum());
    metrics::CLUSTER_VNODES.set(vnodes as i64);
    *status.cluster.lock() = Some(picture);
}

/// The picture the kept keys make (pure, for tests).
pub fn picture_of(kept: &Kept, keys: &Keys, this_node: &str) -> ClusterPicture {
    let mut registered: BTreeMap<String, NodeRecord> = BTreeMap::new();
    let mut assignment: Option<AssignmentRecord> = None;
    let mut coordinator: Option<(i64, String)> = None;
    let mut events: Vec<ClusterEvent> = Vec::new();
    for (key, (value, created)) in kept {
        match keys.kind(key) {
            Key::Node(id) => {
                if let Ok(record) = serde_json::from_slice::<NodeRecord>(value) {
                    registered.insert(id.to_string(), record);
                }
            }
            Key::Candidate => {
                // etcd's election: the oldest candidate key leads.
                if coordinator.as_ref().is_none_or(|(rev, _)| created < rev) {
                    coordinator = Some((*created, String::from_utf8_lossy(value).into_owned()));
                }
            }
            Key::Assignment => assignment = serde_json::from_slice(value).ok(),
            Key::Event => {
                if let Ok(e) = serde_json::from_slice::<EventRecord>(value) {
                    events.push(ClusterEvent::from(&e));
                }
            }
            Key::Other => {}
        }
    }
    let coordinator = coordinator.map(|(_, id)| id);
    let assigned = assignment.as_ref().map(|a| &a.assignment);
    let mut ids: Vec<&String> = registered.keys().collect();
    if let Some(a) = assigned {
        ids.extend(a.nodes.keys().filter(|n| !registered.contains_key(*n)));
    }
    ids.sort();
    let nodes = ids
        .into_iter()
        .map(|id| {
            let record = registered.get(id);
            let vnodes = assigned.map(|a| a.ranges_of(id).to_vec()).unwrap_or_default();
            let state = match (record, vnodes.is_empty()) {
                (None, _) => "gone",
                (Some(_), true) => "joining",
                (Some(_), false) => "up",
            };
            ClusterNode {
                node_id: id.clone(),
                role: if coordinator.as_deref() == Some(id.as_str()) { "coordinator" } else { "worker" }.into(),
                state: state.into(),
                postgres: record.map(|r| r.postgres.clone()).unwrap_or_default(),
                exchange: record.map(|r| r.exchange.clone()).unwrap_or_default(),
                vnodes,
                generation: assigned.map_or(0, |a| a.generation),
                joined_at_micros: record.map(|r| r.joined_at_micros),
            }
        })
        .collect();
    events.sort_by_key(|e| e.at_micros);
    let skip = events.len().saturating_sub(EVENTS_SHOWN);
    ClusterPicture { this_node: this_node.to_string(), nodes, events: events.split_off(skip) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::assignment;
    use crate::cluster::keys::RECORD_VERSION;

    #[test]
    fn the_picture_shows_roles_states_and_vnodes_from_the_keys() {
        let keys = Keys::new("/weir/t/");
        let node = |id: &str| NodeRecord {
            version: RECORD_VERSION,
            node_id: id.into(),
            postgres: format!("{id}:4566"),
            exchange: format!("{id}:4567"),
            joined_at_micros: 1,
            release: "0".into(),
        };
        let members = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect();
        let a = assignment::next(None, &members).unwrap();
        let record =
            AssignmentRecord { version: RECORD_VERSION, coordinator: "n2".into(), at_micros: 1, assignment: a };
        let mut kept: Kept = BTreeMap::new();
        // n1 is gone (in the assignment, not registered); n4 has just joined.
        for id in ["n2", "n3", "n4"] {
            kept.insert(keys.node(id), (serde_json::to_vec(&node(id)).unwrap(), 5));
        }
        kept.insert(keys.assignment(), (serde_json::to_vec(&record).unwrap(), 3));
        kept.insert(format!("{}/7a", keys.election()), (b"n3".to_vec(), 9));
        kept.insert(format!("{}/7b", keys.election()), (b"n2".to_vec(), 8));
        let p = picture_of(&kept, &keys, "n3");
        let row = |id: &str| p.nodes.iter().find(|n| n.node_id == id).unwrap().clone();
        assert_eq!((row("n1").state.as_str(), row("n1").vnodes.clone()), ("gone", vec![(0, 85)]));
        assert_eq!((row("n2").role.as_str(), row("n2").state.as_str()), ("coordinator", "up"));
        assert_eq!((row("n3").role.as_str(), row("n3").vnodes.clone()), ("worker", vec![(171, 255)]));
        assert_eq!((row("n4").state.as_str(), row("n4").generation), ("joining", 1));
        assert_eq!(p.nodes.len(), 4);
    }
}
