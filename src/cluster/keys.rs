//! What the cluster keeps in etcd, and where: every key starts with the cluster's prefix
//! (`/weir/<name>/`), values are JSON with a version field so a newer release can read an
//! older one's records.
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `nodes/<node id>` | [`NodeRecord`] | the node's lease: gone when the node is |
//! | `election/<lease>` | the candidate's node id | its lease (etcd's election API) |
//! | `assignment` | [`Assignment`] | written by the coordinator only, guarded by its leader key |
//! | `events/<micros>-<node id>` | [`EventRecord`] | kept, the last [`EVENTS_KEPT`] |
//!
//! The assignment's etcd revision is its fencing token: work done under an assignment counts
//! only while that revision is the current one (ADR 38).

use serde::{Deserialize, Serialize};

use super::assignment::Assignment;

/// Events kept in etcd; the coordinator deletes older ones.
pub const EVENTS_KEPT: usize = 500;

/// The version of the records below.
pub const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys { prefix: prefix.to_string() }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn node(&self, node_id: &str) -> String {
        format!("{}nodes/{node_id}", self.prefix)
    }

    pub fn nodes(&self) -> String {
        format!("{}nodes/", self.prefix)
    }

    /// The election's name: candidates' keys are `<this>/<lease>` (etcd's election API).
    pub fn election(&self) -> String {
        format!("{}election", self.prefix)
    }

    pub fn assignment(&self) -> String {
        format!("{}assignment", self.prefix)
    }

    pub fn events(&self) -> String {
        format!("{}events/", self.prefix)
    }

    /// An event's key: in time order, unique per node.
    pub fn event(&self, at_micros: i64, node_id: &str) -> String {
        format!("{}events/{at_micros:020}-{node_id}", self.prefix)
    }

    /// What a key under the prefix is.
    pub fn kind<'k>(&self, key: &'k str) -> Key<'k> {
        let Some(rest) = key.strip_prefix(self.prefix.as_str()) else {
            return Key::Other;
        };
        if let Some(id) = rest.strip_prefix("nodes/") {
            Key::Node(id)
        } else if rest.starts_with("election/") {
            Key::Candidate
        } else if rest == "assignment" {
            Key::Assignment
        } else if rest.starts_with("events/") {
            Key::Event
        } else {
            Key::Other
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Key<'k> {
    Node(&'k str),
    Candidate,
    Assignment,
    Event,
    Other,
}

/// A live node, under its lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub version: u32,
    pub node_id: String,
    /// Its Postgres wire address (`host:port`).
    pub postgres: String,
    /// Its exchange service's address (`host:port`); empty in records of releases before it.
    #[serde(default)]
    pub exchange: String,
    pub joined_at_micros: i64,
    /// The Weir release it runs.
    pub release: String,
}

/// The assignment as stored: the decision and who made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssignmentRecord {
    pub version: u32,
    pub coordinator: String,
    pub at_micros: i64,
    #[serde(flatten)]
    pub assignment: Assignment,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub version: u32,
    pub at_micros: i64,
    pub kind: String,
    pub node_id: String,
    pub detail: String,
}

impl EventRecord {
    /// What `node_id` says happened (`kind`: joined, stopped, left, elected, assigned, fenced).
    pub fn new(at_micros: i64, node_id: &str, kind: &str, detail: &str) -> EventRecord {
        EventRecord {
            version: RECORD_VERSION,
            at_micros,
            kind: kind.into(),
            node_id: node_id.into(),
            detail: detail.into(),
        }
    }
}

impl From<&EventRecord> for crate::status::ClusterEvent {
    fn from(e: &EventRecord) -> Self {
        crate::status::ClusterEvent {
            at_micros: e.at_micros,
            kind: e.kind.clone(),
            node_id: e.node_id.clone(),
            detail: e.detail.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_told_apart_by_what_follows_the_prefix() {
        let keys = Keys::new("/weir/default/");
        assert_eq!(keys.kind(&keys.node("n1")), Key::Node("n1"));
        assert_eq!(keys.kind("/weir/default/election/694d7b1a2c3e"), Key::Candidate);
        assert_eq!(keys.kind(&keys.assignment()), Key::Assignment);
        assert_eq!(keys.kind(&keys.event(5, "n1")), Key::Event);
        assert_eq!(keys.kind("/weir/other/nodes/n1"), Key::Other);
        assert!(keys.event(5, "n1") < keys.event(40, "n1"), "events sort by time");
    }

    #[test]
    fn an_assignment_record_reads_back_as_written() {
        let record = AssignmentRecord {
            version: RECORD_VERSION,
            coordinator: "n1".into(),
            at_micros: 7,
            assignment: Assignment {
                generation: 3,
                nodes: [("n1".to_string(), vec![(0, 127)]), ("n2".to_string(), vec![(128, 255)])].into(),
            },
        };
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<AssignmentRecord>(&text).unwrap(), record);
        assert!(text.contains("\"generation\":3"), "{text}");
    }
}
