//! The coordinator: elected with etcd's election API, it keeps the vnode assignment fitting
//! the live nodes.
//!
//! Every node campaigns under its lease; etcd elects the candidate whose key is oldest, and
//! when the coordinator's lease ends its key goes with it and the next candidate is elected.
//! The coordinator writes only in transactions that first compare its leader key's creation
//! revision, so a coordinator deposed while it was not looking (stopped, cut off) changes
//! nothing. It writes `left` events for nodes whose lease ended and an `assigned` event with
//! each new assignment, and trims old events.
//!
//! Run by `session` for the length of one membership session.

use std::collections::BTreeSet;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, LeaderKey, Txn, TxnOp, WatchOptions};
use tracing::{info, warn};

use super::assignment::{self, ranges_text, Assignment};
use super::keys::{AssignmentRecord, EventRecord, Key, Keys, EVENTS_KEPT, RECORD_VERSION};
use crate::metrics;

/// How long the coordinator waits after a change in the members before assigning, so that
/// nodes starting together are assigned together.
const SETTLE: Duration = Duration::from_millis(300);

/// Campaigns, and coordinates while elected; returns only when its task is aborted.
pub async fn campaign(mut client: Client, keys: Keys, node_id: String, lease: i64) {
    loop {
        let elected = client.campaign(keys.election(), node_id.clone(), lease).await;
        let leader = match elected.as_ref().map(|r| r.leader().cloned()) {
            Ok(Some(leader)) => leader,
            Ok(None) => {
                warn!("etcd elected no leader key");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(e) => {
                warn!("campaigning to coordinate the cluster: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        info!(node = %node_id, "elected coordinator");
        metrics::CLUSTER_COORDINATOR.set(1);
        let why = coordinate(&mut client, &keys, &node_id, &leader).await;
        metrics::CLUSTER_COORDINATOR.set(0);
        warn!(node = %node_id, "no longer coordinating: {why}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The live members (their ids) and the revision they were read at.
async fn members(client: &mut Client, keys: &Keys) -> Result<(BTreeSet<String>, i64), etcd_client::Error> {
    let answer = client.get(keys.nodes(), Some(GetOptions::new().with_prefix().with_keys_only())).await?;
    let revision = answer.header().map_or(0, |h| h.revision());
    let members = answer
        .kvs()
        .iter()
        .filter_map(|kv| match keys.kind(kv.key_str().ok()?) {
            Key::Node(id) => Some(id.to_string()),
            _ => None,
        })
        .collect();
    Ok((members, revision))
}

async fn current_assignment(client: &mut Client, keys: &Keys) -> Result<Option<AssignmentRecord>, String> {
    let answer = client.get(keys.assignment(), None).await.map_err(|e| e.to_string())?;
    match answer.kvs().first() {
        None => Ok(None),
        Some(kv) => serde_json::from_slice(kv.value())
            .map(Some)
            .map_err(|e| format!("the stored assignment cannot be read ({e}): a newer release's?")),
    }
}

/// Keeps the assignment fitting the members until leadership is lost; returns why it ended.
async fn coordinate(client: &mut Client, keys: &Keys, node_id: &str, leader: &LeaderKey) -> String {
    let guard = || Compare::create_revision(leader.key().to_vec(), CompareOp::Equal, leader.rev());
    let mut elected = true;
    loop {
        if !elected {
            tokio::time::sleep(SETTLE).await;
        }
        let (live, revision) = match members(client, keys).await {
            Ok(m) => m,
            Err(e) => return format!("reading the members: {e}"),
        };
        let previous = match current_assignment(client, keys).await {
            Ok(p) => p,
            Err(e) => return e,
        };
        let mut writes = Vec::new();
        let mut events = Vec::new();
        let at = chrono::Utc::now().timestamp_micros();
        if elected {
            let detail = format!("coordinating {} live nodes", live.len());
            events.push(EventRecord::new(at, node_id, "elected", &detail));
            elected = false;
        }
        if let Some(next) = assignment::next(previous.as_ref().map(|p| &p.assignment), &live) {
            let gone: Vec<&String> =
                previous.iter().flat_map(|p| p.assignment.nodes.keys()).filter(|n| !live.contains(*n)).collect();
            for node in gone {
                events.push(EventRecord::new(
                    at,
                    node,
                    "left",
                    "its lease ended or it stopped; its vnodes are given to others",
                ));
            }
            let moved = previous.as_ref().map_or(0, |p| p.assignment.moved_to(&next));
            let layout: Vec<String> = next.nodes.iter().map(|(n, r)| format!("{n} {}", ranges_text(r))).collect();
            events.push(EventRecord::new(
                at,
                node_id,
                "assigned",
                &format!("generation {}: {}; {moved} vnodes moved", next.generation, layout.join("; ")),
            ));
            let record = AssignmentRecord {
                version: RECORD_VERSION,
                coordinator: node_id.into(),
                at_micros: at,
                assignment: next,
            };
            writes.push(TxnOp::put(keys.assignment(), serde_json::to_vec(&record).expect("serializes"), None));
            log_assignment(&record.assignment);
        }
        for (i, e) in events.iter().enumerate() {
            let key = keys.event(e.at_micros + i as i64, &e.node_id);
            writes.push(TxnOp::put(key, serde_json::to_vec(e).expect("serializes"), None));
        }
        if !writes.is_empty() {
            match client.txn(Txn::new().when([guard()]).and_then(writes)).await {
                Ok(answer) if answer.succeeded() => {}
                Ok(_) => return "its leader key is gone (its lease ended): another node coordinates".into(),
                Err(e) => return format!("writing the assignment: {e}"),
            }
            trim_events(client, keys).await;
        }
        // Wait for the members to change (or a second, to look again).
        let watch = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
        match client.watch(keys.nodes(), Some(watch)).await {
            Ok(mut stream) => {
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.message()).await;
            }
            Err(e) => return format!("watching the members: {e}"),
        }
    }
}

fn log_assignment(a: &Assignment) {
    for (node, ranges) in &a.nodes {
        info!(generation = a.generation, node = %node, vnodes = %ranges_text(ranges), "vnodes assigned");
    }
}

/// Deletes all but the newest [`EVENTS_KEPT`] events.
async fn trim_events(client: &mut Client, keys: &Keys) {
    let Ok(answer) = client.get(keys.events(), Some(GetOptions::new().with_prefix().with_keys_only())).await else {
        return;
    };
    let count = answer.kvs().len();
    if count <= EVENTS_KEPT {
        return;
    }
    let Some(first_kept) = answer.kvs().get(count - EVENTS_KEPT) else { return };
    let delete = etcd_client::DeleteOptions::new().with_range(first_kept.key().to_vec());
    let _ = client.delete(keys.events(), Some(delete)).await;
}
