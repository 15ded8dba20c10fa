//! A view's operators as a tree, run as `parallelism` shards.
//!
//! Leaves read the view's inputs, the root produces its rows. Nodes are stored children first,
//! so walking them in order visits every child before its parents; that is the order in which
//! barriers flush operators. A subtree the view computes twice is built once and feeds both
//! consumers (strictly, the tree is then a DAG).
//!
//! Every node has one operator instance per shard. A stateful node (aggregate, join, distinct)
//! declares, per input, the key its rows are routed by: a change entering it goes to shard
//! `vnode(key) % parallelism` (an exchange), so each shard owns a disjoint set of keys (and of
//! state). Other edges keep a change in the shard it is in; the view's inputs enter shard 0.
//! Work queued for different shards runs on different threads (the view's own and its
//! [`ShardPool`]'s), so a view's stateful operators use every core; the root's output of all
//! shards is the view's change.
//!
//! In a cluster (issue 46, ADR 39) each node runs the same graph for the vnodes it owns
//! ([`Placement`]): an exchange's rows whose vnode a peer owns leave as [`Outgoing`] rows (the
//! job sends them over the network exchange), and rows a peer sends for this node's vnodes
//! enter at the exchange they crossed ([`Graph::enter`]). A barrier then flushes node by node
//! ([`Graph::flush_node`], children first, the same order on every node), so the job can wait
//! at a node whose inputs cross the network until every peer's rows of the epoch for it are
//! in; [`Graph::barrier`] is the one-process whole.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::physical_expr::PhysicalExpr;

use super::shard_pool::ShardPool;
use crate::error::{Result, WeirError};
use crate::metrics;
use crate::operators::eval::evaluate;
use crate::operators::operator::Operator;
use crate::state::keyed::Flush;
use crate::state::store::WriteBatch;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::key_shards::KeyShards;
use crate::types::ChangeBatch;

/// Routes the rows of a node's input to shards by the vnode of their key.
struct Partitioner {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    shards: KeyShards,
}

struct Node {
    /// The nodes this node feeds, and as which of their inputs: one, or more where a subplan
    /// is shared (a view reading the same windowed relation twice), none for the root.
    parents: Vec<(usize, usize)>,
    /// Per input: the key its rows are routed to shards by (an exchange), if they must move.
    partition: Vec<Option<Partitioner>>,
    rows_in: prometheus::IntCounter,
    rows_out: prometheus::IntCounter,
    /// What EXPLAIN ANALYZE shows of it (rows and time since the job started).
    stats: Arc<crate::status::OperatorStats>,
}

/// Where an exchange's rows go in a cluster: per vnode, here (to shard `vnode % parallelism`)
/// or to a peer node. One process has none: every vnode is here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Per vnode: `None` here, `Some(p)` peer `p` (0-based, fewer than `peers`).
    owners: Vec<Option<u16>>,
    peers: usize,
}

impl Placement {
    /// From the owner of each of the [`VNODE_COUNT`](crate::types::vnode::VNODE_COUNT) vnodes.
    pub fn new(owners: Vec<Option<u16>>) -> Result<Placement> {
        if owners.len() != crate::types::vnode::VNODE_COUNT as usize {
            return Err(WeirError::internal(format!("a placement of {} vnodes", owners.len())));
        }
        let peers = owners.iter().flatten().map(|p| *p as usize + 1).max().unwrap_or(0);
        Ok(Placement { owners, peers })
    }

    /// The peers some vnode is placed on.
    pub fn peers(&self) -> usize {
        self.peers
    }

    /// The peer owning `vnode`, or `None` here.
    pub fn owner(&self, vnode: u16) -> Option<u16> {
        self.owners[vnode as usize]
    }
}

/// Rows an exchange sends to a peer: they enter `node`'s input `slot` there.
#[derive(Debug)]
pub struct Outgoing {
    pub node: usize,
    pub slot: usize,
    pub peer: u16,
    pub batch: ChangeBatch,
}

/// A change waiting to enter `node` (input `slot`) in `shard`.
struct Item {
    shard: usize,
    node: usize,
    slot: usize,
    batch: ChangeBatch,
}

/// A view's graph, with what its job needs to feed it (built by `stream_plan::build`).
pub struct Built {
    pub graph: Graph,
    /// The relation each graph input reads, in input order.
    pub inputs: Vec<crate::state::keys::TableId>,
    /// Per input: its watermark expression over the input's rows, if it declares one.
    pub watermarks: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// The columns of late rows (a windowed input's columns and its window), if the view
    /// windows its input.
    pub late_rows_schema: Option<datafusion::arrow::datatypes::SchemaRef>,
    /// The view only ever inserts rows.
    pub append_only: bool,
    /// The watermark views over this one may take from its rows.
    pub watermark: Option<crate::catalog::persist::WatermarkDef>,
}

pub struct Graph {
    /// The view, for metrics and errors, and where its operators report.
    view: ViewStatus,
    nodes: Vec<Node>,
    /// The threads shards other than the first run on (declared, so dropped, before the
    /// operators they run).
    pool: ShardPool,
    /// `shards[s][n]`: node `n`'s operator in shard `s`.
    shards: Vec<Vec<Box<dyn Operator>>>,
    /// The leaf node reading each of the view's inputs.
    leaves: Vec<usize>,
    /// Leaves of rows the query gives itself, with their rows: entered once, at the backfill.
    constants: Vec<(usize, datafusion::arrow::array::RecordBatch)>,
    /// The view's watermark and the epoch's time, handed to every operator call: the one copy.
    clock: Clock,
    /// Which vnodes are here, in a cluster.
    placement: Option<Placement>,
    /// Its operators were made for the home node (`stream_plan::plan::ClusterShare`): always
    /// in one process.
    home: bool,
    /// Rows for peers, until the job takes them.
    outgoing: Vec<Outgoing>,
}

impl Graph {
    pub fn new(view: ViewStatus, parallelism: usize) -> Graph {
        Graph {
            view,
            nodes: Vec::new(),
            pool: ShardPool::new(parallelism.max(1)),
            shards: (0..parallelism.max(1)).map(|_| Vec::new()).collect(),
            leaves: Vec::new(),
            constants: Vec::new(),
            clock: Clock::default(),
            placement: None,
            home: true,
            outgoing: Vec::new(),
        }
    }

    /// Its operators are made for a node that is not the cluster's home for the view (it
    /// does not own vnode 0).
    pub fn made_away_from_home(&mut self) {
        self.home = false;
    }

    /// Runs this graph for the vnodes `placement` leaves here (a cluster node's share). The
    /// placement must agree with how the operators were made: vnode 0 here exactly when they
    /// were made for the home node (else a global aggregate's group would be on two nodes or
    /// none).
    pub fn place(&mut self, placement: Placement) -> Result<()> {
        if placement.owner(0).is_none() != self.home {
            return Err(WeirError::internal(format!(
                "view \"{}\": placed with vnode 0 {}, but its operators were made {}",
                self.view,
                if placement.owner(0).is_none() { "here" } else { "on a peer" },
                if self.home { "for the home node" } else { "away from home" }
            )));
        }
        self.placement = Some(placement);
        Ok(())
    }

    /// Rows for peers produced since the last call, in the order they were produced.
    pub fn take_outgoing(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.outgoing)
    }

    /// How many nodes the graph has (flushed in index order, [`Graph::flush_node`]).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The inputs of `node` whose rows are exchanged (by key): in a cluster, each is fed by
    /// every peer as well.
    pub fn exchanged_inputs(&self, node: usize) -> Vec<usize> {
        self.nodes[node].partition.iter().enumerate().filter(|(_, p)| p.is_some()).map(|(slot, _)| slot).collect()
    }

    /// The view, and where it reports.
    pub fn view(&self) -> &ViewStatus {
        &self.view
    }

    pub fn parallelism(&self) -> usize {
        self.shards.len()
    }

    /// Adds a node with one operator per shard (`ops`), whose inputs are `children` (in input
    /// order); `exchanges` gives, per input, the key its rows are routed to shards by, where they
    /// are not already in the right shard (stateful nodes).
    /// Returns its index.
    pub fn add(
        &mut self,
        ops: Vec<Box<dyn Operator>>,
        children: &[usize],
        exchanges: Vec<Option<Vec<Arc<dyn PhysicalExpr>>>>,
    ) -> Result<usize> {
        if ops.len() != self.shards.len() {
            return Err(WeirError::internal("an operator instance per shard is needed"));
        }
        let index = self.nodes.len();
        for (slot, &child) in children.iter().enumerate() {
            self.nodes[child].parents.push((index, slot));
        }
        let name = format!("{index}:{}", ops[0].describe().split(':').next().unwrap_or("operator"));
        let counter = |direction: &str| metrics::OPERATOR_ROWS.with_label_values(&[&*self.view, &name, direction]);
        let (rows_in, rows_out) = (counter("in"), counter("out"));
        let partition: Vec<Option<Partitioner>> =
            exchanges.into_iter().map(|e| e.map(|keys| Partitioner { keys, shards: KeyShards::default() })).collect();
        // An input whose rows move between shards is shown as such.
        let label = match partition.iter().any(|p| p.is_some()) {
            true => format!("{} (inputs exchanged)", ops[0].describe()),
            false => ops[0].describe(),
        };
        let stats = Arc::new(crate::status::OperatorStats::new(label, children.to_vec()));
        self.nodes.push(Node { parents: Vec::new(), partition, rows_in, rows_out, stats });
        for (shard, op) in self.shards.iter_mut().zip(ops) {
            shard.push(op);
        }
        Ok(index)
    }

    /// Makes this graph's operators the view's in the status, for EXPLAIN ANALYZE: called once the
    /// graph is the one the view runs (a graph built only to check a plan stays unseen).
    pub fn publish_operators(&self) {
        self.view.publish_operators(self.nodes.iter().map(|n| Arc::clone(&n.stats)).collect());
    }

    /// Records the state tables node `node` owns (EXPLAIN ANALYZE shows their size).
    pub fn owns_tables(&self, node: usize, tables: Vec<crate::state::keys::TableId>) {
        *self.nodes[node].stats.tables.lock() = tables;
    }

    /// Adds a leaf reading the view's next input; returns its index.
    pub fn add_leaf(&mut self, ops: Vec<Box<dyn Operator>>) -> Result<usize> {
        let index = self.add(ops, &[], vec![])?;
        self.leaves.push(index);
        Ok(index)
    }

    /// Pushes changes of input `input` through; returns the root's output.
    /// Adds a leaf of constant rows (`rows`, entered by [`Graph::push_constants`]); returns its
    /// index.
    pub fn add_constant(
        &mut self,
        ops: Vec<Box<dyn Operator>>,
        rows: datafusion::arrow::array::RecordBatch,
    ) -> Result<usize> {
        let index = self.add(ops, &[], vec![])?;
        self.constants.push((index, rows));
        Ok(index)
    }

    /// Enters every constant leaf's rows, in shard 0: once in a view's life, at its backfill
    /// (a view restored from a checkpoint has their effects in its state already).
    pub fn push_constants(&mut self) -> Result<Vec<ChangeBatch>> {
        // In a cluster they enter on one node: where vnode 0 is (where `Single` rows are).
        if self.placement.as_ref().is_some_and(|p| p.owner(0).is_some()) {
            return Ok(Vec::new());
        }
        let items = self
            .constants
            .iter()
            .filter(|(_, rows)| rows.num_rows() > 0)
            .map(|(node, rows)| Item { shard: 0, node: *node, slot: 0, batch: ChangeBatch::inserts(rows.clone()) })
            .collect();
        let mut out = Vec::new();
        self.run(items, &mut out)?;
        Ok(out)
    }

    pub fn push(&mut self, input: usize, batch: ChangeBatch) -> Result<Vec<ChangeBatch>> {
        let mut out = Vec::new();
        let node = self.leaves[input];
        self.run(vec![Item { shard: 0, node, slot: 0, batch }], &mut out)?;
        Ok(out)
    }

    /// The epoch is complete: flushes every operator, children first, and adds their state
    /// changes to `wb` (all of it at a checkpoint: see [`Flush`]); returns the root's output.
    pub fn barrier(&mut self, wb: &mut WriteBatch, flush: Flush) -> Result<Vec<ChangeBatch>> {
        let mut out = Vec::new();
        for node in 0..self.nodes.len() {
            self.flush_node(node, &mut out)?;
        }
        self.flush_state(wb, flush)?;
        Ok(out)
    }

    /// One step of a barrier: `node`'s operators emit what the epoch made them hold, and it is
    /// applied through the nodes above (the root's output added to `out`). Every node is
    /// flushed once per barrier, in index order (children first), then [`Graph::flush_state`].
    pub fn flush_node(&mut self, node: usize, out: &mut Vec<ChangeBatch>) -> Result<()> {
        let everyone: Vec<()> = vec![(); self.shards.len()];
        let clock = self.clock;
        let started = std::time::Instant::now();
        let produced =
            on_each_shard(&mut self.pool, &mut self.shards, everyone, |ops, ()| ops[node].on_barrier(&clock))?;
        self.nodes[node].stats.record(0, 0, started.elapsed().as_nanos() as u64);
        let mut pending = Vec::new();
        for (shard, batches) in produced.into_iter().enumerate() {
            for batch in batches {
                self.route(shard, node, batch, &mut pending, out)?;
            }
        }
        self.run(pending, out)
    }

    /// The barrier's last step: every operator's state changes into `wb` (all of it at a
    /// checkpoint: see [`Flush`]).
    pub fn flush_state(&mut self, wb: &mut WriteBatch, flush: Flush) -> Result<()> {
        let everyone: Vec<()> = vec![(); self.shards.len()];
        let flushed = on_each_shard(&mut self.pool, &mut self.shards, everyone, |ops, ()| {
            let mut shard_wb = WriteBatch::default();
            ops.iter_mut().for_each(|op| op.flush_state(&mut shard_wb, flush));
            Ok(shard_wb.ops)
        })?;
        flushed.into_iter().for_each(|ops| wb.ops.extend(ops));
        Ok(())
    }

    /// Rows a peer sent over the exchange into `node`'s input `slot` (all of vnodes placed
    /// here); returns the root's output. A row of a vnode placed elsewhere means the peer and
    /// this node disagree on the placement: an error, never a row applied twice.
    pub fn enter(&mut self, node: usize, slot: usize, batch: ChangeBatch) -> Result<Vec<ChangeBatch>> {
        let mut out = Vec::new();
        if batch.is_empty() {
            return Ok(out);
        }
        let shards = self.shards.len();
        let Graph { nodes, view, placement, .. } = self;
        let Some(partitioner) = nodes.get_mut(node).and_then(|n| n.partition.get_mut(slot)).and_then(|p| p.as_mut())
        else {
            return Err(WeirError::internal(format!(
                "view \"{view}\": rows from a peer for input {slot} of operator {node}, which is not exchanged"
            )));
        };
        let mut pending = Vec::new();
        for (place, part) in partitioner.split(&batch, shards, placement.as_ref(), view)? {
            match place {
                Place::Shard(shard) => pending.push(Item { shard, node, slot, batch: part }),
                Place::Peer(peer) => {
                    return Err(WeirError::internal(format!(
                        "view \"{view}\": a peer sent rows of vnodes placed on peer {peer} (placements differ)"
                    )))
                }
            }
        }
        self.run(pending, &mut out)?;
        Ok(out)
    }

    /// Applies queued changes until none are left, shard by shard in parallel.
    fn run(&mut self, mut pending: Vec<Item>, out: &mut Vec<ChangeBatch>) -> Result<()> {
        while !pending.is_empty() {
            let mut per_shard: Vec<Vec<Item>> = (0..self.shards.len()).map(|_| Vec::new()).collect();
            for item in pending.drain(..) {
                let rows = item.batch.num_rows() as u64;
                self.nodes[item.node].rows_in.inc_by(rows);
                self.nodes[item.node].stats.record(rows, 0, 0);
                per_shard[item.shard].push(item);
            }
            let clock = self.clock;
            let produced = on_each_shard(&mut self.pool, &mut self.shards, per_shard, |ops, items| {
                let mut produced = Vec::new();
                let mut spent = Vec::new();
                for item in items {
                    let started = std::time::Instant::now();
                    for batch in ops[item.node].apply(item.slot, item.batch, &clock)? {
                        produced.push((item.node, batch));
                    }
                    spent.push((item.node, started.elapsed().as_nanos() as u64));
                }
                Ok((produced, spent))
            })?;
            for (shard, (batches, spent)) in produced.into_iter().enumerate() {
                for (node, nanos) in spent {
                    self.nodes[node].stats.record(0, 0, nanos);
                }
                for (node, batch) in batches {
                    self.route(shard, node, batch, &mut pending, out)?;
                }
            }
        }
        Ok(())
    }

    /// Sends `batch`, produced by `node` in `shard`, to its parents (or to the view's output).
    fn route(
        &mut self,
        shard: usize,
        node: usize,
        batch: ChangeBatch,
        pending: &mut Vec<Item>,
        out: &mut Vec<ChangeBatch>,
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.nodes[node].rows_out.inc_by(batch.num_rows() as u64);
        self.nodes[node].stats.record(0, batch.num_rows() as u64, 0);
        if self.nodes[node].parents.is_empty() {
            out.push(batch);
            return Ok(());
        }
        let shards = self.shards.len();
        let Graph { nodes, view, placement, outgoing, .. } = self;
        for i in 0..nodes[node].parents.len() {
            let (parent, slot) = nodes[node].parents[i];
            match nodes[parent].partition.get_mut(slot).and_then(|p| p.as_mut()) {
                Some(partitioner) if shards > 1 || placement.is_some() => {
                    for (place, part) in partitioner.split(&batch, shards, placement.as_ref(), view)? {
                        match place {
                            Place::Shard(target) => {
                                pending.push(Item { shard: target, node: parent, slot, batch: part })
                            }
                            Place::Peer(peer) => outgoing.push(Outgoing { node: parent, slot, peer, batch: part }),
                        }
                    }
                }
                _ => pending.push(Item { shard, node: parent, slot, batch: batch.clone() }),
            }
        }
        Ok(())
    }

    /// Every operator's checkpoint record ([`Operator::save_record`]) for a checkpoint, by node and
    /// shard; operators that keep none are left out.
    pub fn save_records(&mut self) -> Result<Vec<(u16, u16, Vec<u8>)>> {
        let shards: Vec<u16> = (0..self.shards.len() as u16).collect();
        let records = on_each_shard(&mut self.pool, &mut self.shards, shards, |ops, shard| {
            let records = ops.iter().enumerate().filter_map(|(node, op)| Some((node as u16, shard, op.save_record()?)));
            Ok(records.collect::<Vec<_>>())
        })?;
        Ok(records.into_iter().flatten().collect())
    }

    /// Restores the checkpoint record of node `node` in shard `shard` (from [`Graph::save_records`]
    /// at a checkpoint of a view built the same way).
    pub fn restore_record(&mut self, node: u16, shard: u16, record: &[u8]) -> Result<()> {
        let op = self
            .shards
            .get_mut(shard as usize)
            .and_then(|ops| ops.get_mut(node as usize))
            .ok_or_else(|| WeirError::new(crate::error::SqlState::DATA_CORRUPTED, format!(
                "view \"{}\": the checkpoint holds state of operator {node} in shard {shard}, which this view does not have",
                self.view
            )))?;
        op.restore_record(record)
    }

    /// The epoch about to end has time `now` (`now()` in the view): the operators' calls from
    /// here on, its barrier's first, carry it.
    pub fn epoch_time(&mut self, now: i64) {
        self.clock.now = Some(now);
    }

    /// The view's watermark advanced: the operators' calls from here on carry it (changes are
    /// applied to completion before, so it follows exactly the data before it).
    pub fn watermark(&mut self, watermark: i64) {
        self.clock.watermark = Some(watermark);
    }

    /// Rows that arrived too late for their windows since the last call.
    pub fn take_late_rows(&mut self) -> Vec<datafusion::arrow::array::RecordBatch> {
        self.shards.iter_mut().flat_map(|shard| shard.iter_mut().flat_map(|op| op.take_late_rows())).collect()
    }

    /// Windows with state, over all operators and shards.
    pub fn open_windows(&self) -> usize {
        self.shards.iter().flat_map(|shard| shard.iter().map(|op| op.open_windows())).sum()
    }

    /// Bytes operators hold in memory outside their tables' caches, over all shards.
    pub fn memory_bytes(&self) -> usize {
        self.shards.iter().flat_map(|shard| shard.iter().map(|op| op.memory_bytes())).sum()
    }

    /// The tree, root first, indented by depth. A shared subtree is shown in full once; where
    /// it is met again its top is marked `(shared)`.
    pub fn explain(&self) -> String {
        let mut lines = Vec::new();
        let mut shown = vec![false; self.nodes.len()];
        if let Some(root) = self.nodes.iter().position(|n| n.parents.is_empty()) {
            self.explain_node(root, 0, &mut lines, &mut shown);
        }
        lines.join("\n")
    }

    fn explain_node(&self, index: usize, depth: usize, lines: &mut Vec<String>, shown: &mut [bool]) {
        let indent = "  ".repeat(depth);
        if shown[index] {
            lines.push(format!("{indent}{} (shared)", self.shards[0][index].describe()));
            return;
        }
        shown[index] = true;
        lines.push(format!("{indent}{}", self.shards[0][index].describe()));
        let mut children: Vec<(usize, usize)> = self
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| n.parents.iter().filter(|(p, _)| *p == index).map(move |&(_, slot)| (slot, i)))
            .collect();
        children.sort();
        for (slot, child) in children {
            match self.nodes[index].partition.get(slot).and_then(|p| p.as_ref()) {
                Some(exchange) => {
                    let keys: Vec<String> = exchange.keys.iter().map(|k| k.to_string()).collect();
                    let how =
                        if keys.is_empty() { "single".to_string() } else { format!("hash [{}]", keys.join(", ")) };
                    lines.push(format!("{indent}  Exchange: {how}"));
                    self.explain_node(child, depth + 2, lines, shown);
                }
                None => self.explain_node(child, depth + 1, lines, shown),
            }
        }
    }
}

/// Where a part of an exchange's rows goes.
enum Place {
    Shard(usize),
    Peer(u16),
}

impl Partitioner {
    /// `batch`'s rows grouped by the shard their key belongs to, or, in a cluster, the peer
    /// its vnode is placed on.
    fn split(
        &mut self,
        batch: &ChangeBatch,
        shards: usize,
        placement: Option<&Placement>,
        view: &ViewStatus,
    ) -> Result<Vec<(Place, ChangeBatch)>> {
        let keys: Vec<ArrayRef> = self.keys.iter().map(|k| evaluate(k, &batch.data, view)).collect::<Result<_>>()?;
        let Some(placement) = placement else {
            let parts = self.shards.split(batch, &keys, shards)?;
            return Ok(parts.into_iter().map(|(shard, part)| (Place::Shard(shard), part)).collect());
        };
        // Places 0..shards are shards here, then one per peer.
        let place = |vnode: u16| match placement.owner(vnode) {
            None => vnode as usize % shards,
            Some(peer) => shards + peer as usize,
        };
        let parts = self.shards.split_by(batch, &keys, shards + placement.peers(), place)?;
        Ok(parts
            .into_iter()
            .map(|(at, part)| match at < shards {
                true => (Place::Shard(at), part),
                false => (Place::Peer((at - shards) as u16), part),
            })
            .collect())
    }
}

/// Runs `f` on each shard's operators with that shard's `work`, on the shards' threads when
/// more than one shard has work (`is_empty` work is skipped for threads but still gets `f`).
fn on_each_shard<W: Send + Idle, T: Send + Default>(
    pool: &mut ShardPool,
    shards: &mut [Vec<Box<dyn Operator>>],
    work: Vec<W>,
    f: impl Fn(&mut Vec<Box<dyn Operator>>, W) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let busy = work.iter().filter(|w| !w.idle()).count();
    if busy <= 1 {
        return shards
            .iter_mut()
            .zip(work)
            .map(|(ops, w)| if w.idle() { Ok(T::default()) } else { f(ops, w) })
            .collect();
    }
    let f = &f;
    let tasks: Vec<Box<dyn FnOnce() -> Result<T> + Send + '_>> = shards
        .iter_mut()
        .zip(work)
        .map(|(ops, w)| {
            let task: Box<dyn FnOnce() -> Result<T> + Send + '_> =
                Box::new(move || if w.idle() { Ok(T::default()) } else { f(ops, w) });
            task
        })
        .collect();
    pool.run(tasks).into_iter().map(|r| r.unwrap_or_else(|_| Err(WeirError::internal("a shard panicked")))).collect()
}

/// Whether a shard has nothing to do.
trait Idle {
    fn idle(&self) -> bool;
}

impl Idle for Vec<Item> {
    fn idle(&self) -> bool {
        self.is_empty()
    }
}

impl Idle for () {
    fn idle(&self) -> bool {
        false
    }
}

impl Idle for u16 {
    fn idle(&self) -> bool {
        false
    }
}
