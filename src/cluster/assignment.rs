//! Which node owns which vnodes: a pure function from the live nodes and the last assignment
//! to the next one, so the coordinator's decision can be tested without etcd (ADR 38).
//!
//! Invariants of every [`Assignment`] made here: each of the [`VNODE_COUNT`] vnodes has exactly
//! one owner among the live nodes; the counts differ by at most one; and a vnode moves only
//! when it must: when its owner left, or its owner holds more than its share. So a node that
//! joins takes about `VNODE_COUNT / n` vnodes from the others and a node that leaves gives
//! exactly its own away (Flink's key groups and RisingWave's vnode mappings move as little).
//! Moved vnodes are taken and given in runs of neighbours, so ranges stay few.
//!
//! Called by `cluster::election` (the coordinator) each time the members change.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::types::vnode::VNODE_COUNT;

/// Who owns each vnode, and the generation of that decision (one more at each change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub generation: u64,
    /// Each node's vnode ranges, inclusive, in order.
    pub nodes: BTreeMap<String, Vec<(u16, u16)>>,
}

impl Assignment {
    /// The owner of every vnode, by vnode; `None` where no node owns it (never, for an
    /// assignment made by [`next`]).
    pub fn owners(&self) -> Vec<Option<&str>> {
        let mut owners = vec![None; VNODE_COUNT as usize];
        for (node, ranges) in &self.nodes {
            for &(first, last) in ranges {
                for v in first..=last.min(VNODE_COUNT - 1) {
                    owners[v as usize] = Some(node.as_str());
                }
            }
        }
        owners
    }

    /// `node`'s ranges (empty when it owns none).
    pub fn ranges_of(&self, node: &str) -> &[(u16, u16)] {
        self.nodes.get(node).map(Vec::as_slice).unwrap_or(&[])
    }

    /// How many vnodes change owner from `self` to `next`.
    pub fn moved_to(&self, next: &Assignment) -> usize {
        self.owners().iter().zip(next.owners()).filter(|(a, b)| **a != *b).count()
    }
}

/// The assignment that follows `previous` for the live `members`: `None` when `previous`
/// already fits them (every vnode owned by a member, shares balanced) or there are no members.
pub fn next(previous: Option<&Assignment>, members: &BTreeSet<String>) -> Option<Assignment> {
    if members.is_empty() {
        return None;
    }
    let n = members.len();
    let share = VNODE_COUNT as usize / n;
    let extra = VNODE_COUNT as usize % n;
    let mut owners: Vec<Option<String>> = match previous {
        Some(p) => p.owners().into_iter().map(|o| o.filter(|o| members.contains(*o)).map(String::from)).collect(),
        None => vec![None; VNODE_COUNT as usize],
    };
    // Quotas: the `extra` nodes holding the most now (ties: by name) may keep one more.
    let mut held: Vec<(usize, &String)> =
        members.iter().map(|m| (owners.iter().filter(|o| o.as_deref() == Some(m.as_str())).count(), m)).collect();
    held.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let quota: BTreeMap<&String, usize> =
        held.iter().enumerate().map(|(i, (_, m))| (*m, share + usize::from(i < extra))).collect();
    // Over its quota, a node gives up its highest vnodes (whole runs at the top of its ranges).
    let mut count: BTreeMap<&String, usize> = BTreeMap::new();
    for owner in owners.iter_mut() {
        if let Some(node) = owner.as_ref() {
            let (key, _) = quota.get_key_value(node).expect("owners are members");
            let c = count.entry(*key).or_default();
            *c += 1;
            if *c > quota[key] {
                *owner = None;
            }
        }
    }
    // Free vnodes go, in order, to the nodes under quota, in order: each takes a run.
    let takers: Vec<&String> = members.iter().filter(|m| count.get(m).copied().unwrap_or(0) < quota[m]).collect();
    let mut taker = 0;
    for owner in owners.iter_mut().filter(|o| o.is_none()) {
        while count.get(takers[taker]).copied().unwrap_or(0) >= quota[takers[taker]] {
            taker += 1;
        }
        let t = takers[taker];
        *count.entry(t).or_default() += 1;
        *owner = Some(t.clone());
    }
    let mut nodes: BTreeMap<String, Vec<(u16, u16)>> = members.iter().map(|m| (m.clone(), Vec::new())).collect();
    for (v, owner) in owners.iter().enumerate() {
        let ranges = nodes.get_mut(owner.as_ref().expect("every vnode has an owner")).expect("a member");
        match ranges.last_mut() {
            Some((_, last)) if *last as usize + 1 == v => *last = v as u16,
            _ => ranges.push((v as u16, v as u16)),
        }
    }
    let generation = previous.map_or(1, |p| p.generation + 1);
    let next = Assignment { generation, nodes };
    match previous {
        Some(p) if p.nodes == next.nodes => None,
        _ => Some(next),
    }
}

/// Ranges as people read them: `0-84,200-210`.
pub fn ranges_text(ranges: &[(u16, u16)]) -> String {
    ranges.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// Every vnode owned once, by a member, with shares that differ by at most one.
    fn check(a: &Assignment, names: &[&str]) {
        let owners = a.owners();
        assert!(owners.iter().all(|o| o.is_some_and(|o| names.contains(&o))), "{a:?}");
        let total: usize = a.nodes.values().flatten().map(|(x, y)| (y - x + 1) as usize).sum();
        assert_eq!(total, VNODE_COUNT as usize, "{a:?}");
        let counts: Vec<usize> = names.iter().map(|n| owners.iter().filter(|o| **o == Some(n)).count()).collect();
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "{counts:?}");
    }

    #[test]
    fn a_first_assignment_gives_each_node_one_range_in_name_order() {
        let a = next(None, &members(&["n1", "n2", "n3"])).unwrap();
        assert_eq!(a.generation, 1);
        assert_eq!(a.ranges_of("n1"), &[(0, 85)]);
        assert_eq!(a.ranges_of("n2"), &[(86, 170)]);
        assert_eq!(a.ranges_of("n3"), &[(171, 255)]);
        check(&a, &["n1", "n2", "n3"]);
    }

    #[test]
    fn an_assignment_that_fits_its_members_is_kept() {
        let a = next(None, &members(&["n1", "n2"])).unwrap();
        assert_eq!(next(Some(&a), &members(&["n1", "n2"])), None);
        assert_eq!(next(Some(&a), &BTreeSet::new()), None);
    }

    #[test]
    fn a_node_that_leaves_gives_away_only_its_own_vnodes() {
        let a = next(None, &members(&["n1", "n2", "n3"])).unwrap();
        let b = next(Some(&a), &members(&["n1", "n3"])).unwrap();
        check(&b, &["n1", "n3"]);
        assert_eq!(b.generation, 2);
        assert_eq!(a.moved_to(&b), a.ranges_of("n2").iter().map(|(x, y)| (y - x + 1) as usize).sum::<usize>());
        // Each survivor keeps what it had.
        let (a_owners, b_owners) = (a.owners(), b.owners());
        for v in 0..VNODE_COUNT as usize {
            if a_owners[v] != Some("n2") {
                assert_eq!(a_owners[v], b_owners[v], "vnode {v}");
            }
        }
    }

    #[test]
    fn a_node_that_joins_takes_about_its_share_and_nothing_else_moves() {
        let a = next(None, &members(&["n1", "n2", "n3"])).unwrap();
        let b = next(Some(&a), &members(&["n1", "n2", "n3", "n4"])).unwrap();
        check(&b, &["n1", "n2", "n3", "n4"]);
        assert_eq!(a.moved_to(&b), 64, "{b:?}");
        let (a_owners, b_owners) = (a.owners(), b.owners());
        for v in 0..VNODE_COUNT as usize {
            assert!(b_owners[v] == a_owners[v] || b_owners[v] == Some("n4"), "vnode {v} moved between old nodes");
        }
        // In runs: one range taken from each old node's top.
        assert!(b.ranges_of("n4").len() <= 3, "{b:?}");
    }

    #[test]
    fn any_sequence_of_joins_and_leaves_stays_balanced_and_moves_only_what_it_must() {
        // A fixed pseudo-random walk over eight names.
        let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
        let mut live: BTreeSet<String> = members(&["a"]);
        let mut current = next(None, &live).unwrap();
        let mut x: u64 = 0x9E3779B97F4A7C15;
        for _ in 0..500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let name = names[(x % names.len() as u64) as usize].to_string();
            let before = live.clone();
            if live.contains(&name) && live.len() > 1 {
                live.remove(&name);
            } else {
                live.insert(name);
            }
            let Some(after) = next(Some(&current), &live) else {
                assert_eq!(before, live);
                continue;
            };
            let live_names: Vec<&str> = live.iter().map(String::as_str).collect();
            check(&after, &live_names);
            assert_eq!(after.generation, current.generation + 1);
            // A node present before and after never loses vnodes to another old node.
            let (old, new) = (current.owners(), after.owners());
            for v in 0..VNODE_COUNT as usize {
                if let (Some(o), Some(n)) = (old[v], new[v]) {
                    if o != n && live.contains(o) && before.contains(n) {
                        // Allowed only when o had more than its share.
                        let share = VNODE_COUNT as usize / live.len() + 1;
                        assert!(old.iter().filter(|w| **w == Some(o)).count() >= share, "vnode {v}: {o} -> {n}");
                    }
                }
            }
            current = after;
        }
    }

    #[test]
    fn ranges_read_as_people_write_them() {
        assert_eq!(ranges_text(&[(0, 84), (90, 90), (200, 210)]), "0-84,90,200-210");
        assert_eq!(ranges_text(&[]), "");
    }
}
