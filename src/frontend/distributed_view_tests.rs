//! A view's graph split over two nodes by vnode placement (`dataflow::graph::Placement`) gives
//! the rows one graph gives: each node applies its share of the input, the rows its exchanges
//! send the other enter there, barriers flush node by node in lockstep, and the union of the
//! two roots' changes, netted, equals the single graph's. The network is left out (the
//! exchange's transport is tested in `exchange`); this is the dataflow's half of a cluster.
//!
//! Here because a plan needs the frontend (DataFusion planning of the view's query).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Int32Array, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;

use super::handler::create_view::plan_view;
use super::parser::Statement;
use super::Frontend;
use crate::catalog::Catalog;
use crate::dataflow::coordinator::EpochBounds;
use crate::dataflow::graph::{Graph, Outgoing, Placement};
use crate::dataflow::manager::Streaming;
use crate::state::keyed::Flush;
use crate::state::memory::MemoryStore;
use crate::state::store::{StateStore, WriteBatch};
use crate::stream_plan::build;
use crate::stream_plan::plan::{ClusterShare, ViewOptions};
use crate::types::change_batch::Op;
use crate::types::vnode::VNODE_COUNT;
use crate::types::ChangeBatch;

/// A node: a frontend over its own store, with tables `t (k, g, x)` and `u (k, w)`.
struct Node {
    fe: Frontend,
    store: Arc<dyn StateStore>,
}

async fn node() -> Node {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let status = Arc::new(crate::status::Status::default());
    let catalog = Arc::new(Catalog::open(Arc::clone(&store), "dev", status).unwrap().without_change_log());
    let bounds = EpochBounds { interval: std::time::Duration::from_secs(3600), max_rows: 0 };
    let streaming = Streaming::new(Arc::clone(&catalog), bounds, 1 << 16, std::time::Duration::from_secs(10), None, 0);
    let fe = Frontend::new(catalog, streaming, vec![]).await.unwrap();
    let mut session = fe.new_session("root");
    for sql in ["CREATE TABLE t (k INT, g INT, x INT)", "CREATE TABLE u (k INT, w INT)"] {
        let statement = fe.parse(sql).unwrap().remove(0);
        fe.execute(&mut session, statement, None).await.unwrap();
    }
    Node { fe, store }
}

/// The view `sql`'s graph on `node`, in `shards` shards, and the schemas of its inputs;
/// `cluster`: planned as a node's share of it.
async fn graph(node: &Node, sql: &str, shards: usize, cluster: Option<ClusterShare>) -> (Graph, Vec<SchemaRef>) {
    let session = node.fe.new_session("root");
    let Statement::Sql(statement) = node.fe.parse(sql).unwrap().remove(0) else { panic!("sql") };
    let rules = crate::frontend::df_context::PlanningRules::CURRENT;
    let (_, plan) = plan_view(&session, &statement, rules).await.unwrap();
    let options =
        ViewOptions { state_format: crate::state::value::StateFormat::CURRENT, cluster, ..Default::default() };
    let (fe, state) = (&node.fe, session.ctx.state());
    let built = build(&plan, &state, fe.catalog(), "v", 900, fe.streaming().operator_state, shards, &options).unwrap();
    let schemas = built.inputs.iter().map(|id| Arc::clone(&node.fe.catalog().by_id(*id).unwrap().schema)).collect();
    (built.graph, schemas)
}

fn batch(schema: &SchemaRef, rows: &[(Op, Vec<i32>)]) -> ChangeBatch {
    let columns = (0..schema.fields().len())
        .map(|c| Arc::new(Int32Array::from(rows.iter().map(|(_, r)| r[c]).collect::<Vec<_>>())) as _)
        .collect();
    ChangeBatch::new(
        RecordBatch::try_new(Arc::clone(schema), columns).unwrap(),
        rows.iter().map(|(op, _)| *op).collect(),
    )
}

/// A small deterministic generator.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// One input's changes in one epoch.
type Changes = Vec<(Op, Vec<i32>)>;

/// Per epoch, each input's changes (inserts, and deletes of rows inserted before).
fn workload(arity: &[usize], epochs: usize, seed: u64) -> Vec<Vec<Changes>> {
    let mut rng = Rng(seed);
    let mut live: Vec<Vec<Vec<i32>>> = vec![Vec::new(); arity.len()];
    (0..epochs)
        .map(|_| {
            arity
                .iter()
                .enumerate()
                .map(|(input, &columns)| {
                    let mut changes = Vec::new();
                    for _ in 0..40 {
                        if !live[input].is_empty() && rng.below(4) == 0 {
                            let at = rng.below(live[input].len() as u64) as usize;
                            let row = live[input].swap_remove(at);
                            changes.push((Op::Delete, row));
                        } else {
                            let row: Vec<i32> = (0..columns).map(|_| rng.below(12) as i32).collect();
                            live[input].push(row.clone());
                            changes.push((Op::Insert, row));
                        }
                    }
                    changes
                })
                .collect()
        })
        .collect()
}

/// The changes, netted: row text to multiplicity.
fn net(changes: &[ChangeBatch], into: &mut BTreeMap<String, i64>) {
    for change in changes {
        let text = change.to_pretty();
        for (line, op) in text.lines().zip(&change.ops) {
            let row = line.split_once(' ').map_or("", |(_, r)| r).to_string();
            *into.entry(row).or_default() += op.sign();
        }
    }
    into.retain(|_, n| *n != 0);
}

fn write(store: &Arc<dyn StateStore>, wb: WriteBatch) {
    store.write(wb).unwrap();
}

/// Moves rows each node's exchanges produced to the other until none are left (counted per
/// direction in `crossed`); the roots' outputs go to `outs`.
fn shuttle(graphs: &mut [Graph; 2], outs: &mut [Vec<ChangeBatch>; 2], crossed: &mut [usize; 2]) {
    loop {
        let sent: Vec<Vec<Outgoing>> = graphs.iter_mut().map(|g| g.take_outgoing()).collect();
        if sent.iter().all(|s| s.is_empty()) {
            return;
        }
        for (from, rows) in sent.into_iter().enumerate() {
            let to = 1 - from;
            for o in rows {
                assert_eq!(o.peer, 0, "each node has one peer");
                crossed[from] += o.batch.num_rows();
                outs[to].extend(graphs[to].enter(o.node, o.slot, o.batch).unwrap());
            }
        }
    }
}

/// `keyed`: the view's exchanges are by key (rows cross both ways), not all to the home node.
async fn split_equals_whole(sql: &str, seed: u64, keyed: bool) {
    let (whole_node, a, b) = (node().await, node().await, node().await);
    // Node a is home: it owns vnode 0.
    let (mut whole, schemas) = graph(&whole_node, sql, 2, None).await;
    let (ga, _) = graph(&a, sql, 2, Some(ClusterShare { home: true })).await;
    let (gb, _) = graph(&b, sql, 1, Some(ClusterShare { home: false })).await;
    let mut graphs = [ga, gb];
    // Node a owns vnodes 0-99 and 200-255, node b 100-199.
    let on_b = |v: u16| (100..200).contains(&v);
    let placement = |peer_owns: &dyn Fn(u16) -> bool| {
        Placement::new((0..VNODE_COUNT).map(|v| peer_owns(v).then_some(0)).collect()).unwrap()
    };
    // A placement that disagrees with how the operators were made is refused.
    assert!(graphs[1].place(placement(&|v| on_b(v))).is_err(), "b's operators were made away from home");
    graphs[0].place(placement(&|v| on_b(v))).unwrap();
    graphs[1].place(placement(&|v| !on_b(v))).unwrap();
    let stores = [Arc::clone(&a.store), Arc::clone(&b.store)];

    let (mut expected, mut got) = (BTreeMap::new(), BTreeMap::new());
    let mut crossed = [0usize; 2];
    let arity: Vec<usize> = schemas.iter().map(|s| s.fields().len()).collect();
    for (epoch, inputs) in workload(&arity, 12, seed).into_iter().enumerate() {
        let mut outs: [Vec<ChangeBatch>; 2] = [Vec::new(), Vec::new()];
        let mut whole_out = Vec::new();
        for (input, changes) in inputs.iter().enumerate() {
            whole_out.extend(whole.push(input, batch(&schemas[input], changes)).unwrap());
            // Each node reads a part of the input; a row's changes enter on one node (a
            // table's row where its key is owned, as DML is routed; a source's partition where
            // it is read), so its delete meets its insert wherever the plan keeps rows apart.
            let (first, second): (Vec<_>, Vec<_>) =
                changes.iter().cloned().partition(|(_, row)| row.iter().map(|v| *v as usize).sum::<usize>() % 3 != 0);
            let parts = [first, second];
            for (n, part) in parts.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
                outs[n].extend(graphs[n].push(input, batch(&schemas[input], part)).unwrap());
            }
            shuttle(&mut graphs, &mut outs, &mut crossed);
        }
        // The barrier: node by node on both, each node's rows for the next node moved first.
        let mut wb = WriteBatch::default();
        whole_out.extend(whole.barrier(&mut wb, Flush::EPOCH_AFTER_WRITES).unwrap());
        write(&whole_node.store, wb);
        for k in 0..graphs[0].node_count() {
            for n in 0..2 {
                let mut out = Vec::new();
                graphs[n].flush_node(k, &mut out).unwrap();
                outs[n].extend(out);
            }
            shuttle(&mut graphs, &mut outs, &mut crossed);
        }
        for n in 0..2 {
            let mut wb = WriteBatch::default();
            graphs[n].flush_state(&mut wb, Flush::EPOCH_AFTER_WRITES).unwrap();
            write(&stores[n], wb);
        }
        net(&whole_out, &mut expected);
        net(&outs[0], &mut got);
        net(&outs[1], &mut got);
        assert_eq!(got, expected, "{sql}: after epoch {epoch}");
    }
    assert!(!expected.is_empty(), "the workload leaves rows");
    // Rows crossed: from b to the home node always, and from a to b where keys are spread.
    assert!(crossed[1] > 0 && (crossed[0] > 0 || !keyed), "{sql}: rows crossed {crossed:?}");
}

#[tokio::test]
async fn a_grouped_aggregate_split_over_two_nodes_equals_one_graph() {
    split_equals_whole("CREATE MATERIALIZED VIEW v AS SELECT g, count(*) AS n, sum(x) AS s FROM t GROUP BY g", 1, true)
        .await;
}

#[tokio::test]
async fn a_join_then_an_aggregate_split_over_two_nodes_equals_one_graph() {
    // Two exchanges in a row (by the join key, then by the group), retractions through both.
    split_equals_whole(
        "CREATE MATERIALIZED VIEW v AS SELECT t.g, count(*) AS n, max(u.w) AS m FROM t JOIN u ON t.k = u.k GROUP BY t.g",
        7,
        true,
    )
    .await;
}

#[tokio::test]
async fn a_global_aggregate_and_a_distinct_split_over_two_nodes_equal_one_graph() {
    // No group key: every row goes to where vnode 0 is (an exchange the cluster's plan has and
    // one process's does not: its inputs are all in shard 0 already).
    split_equals_whole("CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n, sum(x) AS s FROM t", 3, false).await;
    split_equals_whole("CREATE MATERIALIZED VIEW v AS SELECT DISTINCT g, x FROM t", 5, true).await;
}

#[tokio::test]
async fn a_top_n_and_an_outer_join_split_over_two_nodes_equal_one_graph() {
    // Top-N gathers its rows on the home node; the outer join pads and retracts NULL rows on
    // the node its key is placed on.
    split_equals_whole("CREATE MATERIALIZED VIEW v AS SELECT g, x FROM t ORDER BY x DESC, g LIMIT 5", 11, false).await;
    split_equals_whole("CREATE MATERIALIZED VIEW v AS SELECT t.k, t.x, u.w FROM t LEFT JOIN u ON t.k = u.k", 13, true)
        .await;
}
