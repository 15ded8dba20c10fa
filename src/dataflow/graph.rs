//! A view's operators as a tree: leaves read the view's inputs, the root produces its rows.
//!
//! Nodes are stored children first, so walking them in order visits every child before its
//! parent; that is the order in which barriers flush operators. A change enters at a leaf and
//! is handed from node to parent until it leaves the root.

use crate::error::Result;
use crate::metrics;
use crate::operators::operator::Operator;
use crate::state::store::WriteBatch;
use crate::types::ChangeBatch;

struct Node {
    op: Box<dyn Operator>,
    rows_in: prometheus::IntCounter,
    rows_out: prometheus::IntCounter,
    /// The parent node and which of its inputs this node feeds.
    parent: Option<(usize, usize)>,
}

#[derive(Default)]
pub struct Graph {
    /// The view, for metrics.
    view: String,
    nodes: Vec<Node>,
    /// The leaf node reading each of the view's inputs.
    leaves: Vec<usize>,
}

impl Graph {
    pub fn new(view: &str) -> Graph {
        Graph { view: view.to_string(), ..Default::default() }
    }

    /// Adds a node whose inputs are `children` (in input order); returns its index.
    pub fn add(&mut self, op: Box<dyn Operator>, children: &[usize]) -> usize {
        let index = self.nodes.len();
        for (slot, &child) in children.iter().enumerate() {
            self.nodes[child].parent = Some((index, slot));
        }
        let name = format!("{index}:{}", op.describe().split(':').next().unwrap_or("operator"));
        let counter = |direction: &str| metrics::OPERATOR_ROWS.with_label_values(&[&self.view, &name, direction]);
        let (rows_in, rows_out) = (counter("in"), counter("out"));
        self.nodes.push(Node { op, rows_in, rows_out, parent: None });
        index
    }

    /// Adds a leaf reading the view's next input; returns its index.
    pub fn add_leaf(&mut self, op: Box<dyn Operator>) -> usize {
        let index = self.add(op, &[]);
        self.leaves.push(index);
        index
    }

    /// Pushes changes of input `input` through; returns the root's output.
    pub fn push(&mut self, input: usize, batch: ChangeBatch) -> Result<Vec<ChangeBatch>> {
        let mut out = Vec::new();
        let leaf = self.leaves[input];
        self.nodes[leaf].rows_in.inc_by(batch.num_rows() as u64);
        let produced = self.nodes[leaf].op.apply(0, batch)?;
        self.forward(leaf, produced, &mut out)?;
        Ok(out)
    }

    /// The epoch is complete: flushes every operator, children first, and adds their state
    /// changes to `wb`; returns the root's output.
    pub fn barrier(&mut self, wb: &mut WriteBatch) -> Result<Vec<ChangeBatch>> {
        let mut out = Vec::new();
        for index in 0..self.nodes.len() {
            let produced = self.nodes[index].op.on_barrier()?;
            self.forward(index, produced, &mut out)?;
        }
        for node in &mut self.nodes {
            node.op.flush_state(wb);
        }
        Ok(out)
    }

    fn forward(&mut self, from: usize, batches: Vec<ChangeBatch>, out: &mut Vec<ChangeBatch>) -> Result<()> {
        for batch in batches.into_iter().filter(|b| !b.is_empty()) {
            self.nodes[from].rows_out.inc_by(batch.num_rows() as u64);
            match self.nodes[from].parent {
                None => out.push(batch),
                Some((parent, slot)) => {
                    self.nodes[parent].rows_in.inc_by(batch.num_rows() as u64);
                    let produced = self.nodes[parent].op.apply(slot, batch)?;
                    self.forward(parent, produced, out)?;
                }
            }
        }
        Ok(())
    }

    /// The tree, root first, indented by depth.
    pub fn explain(&self) -> String {
        let mut lines = Vec::new();
        if let Some(root) = self.nodes.iter().position(|n| n.parent.is_none()) {
            self.explain_node(root, 0, &mut lines);
        }
        lines.join("\n")
    }

    fn explain_node(&self, index: usize, depth: usize, lines: &mut Vec<String>) {
        lines.push(format!("{}{}", "  ".repeat(depth), self.nodes[index].op.describe()));
        let mut children: Vec<(usize, usize)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.parent.filter(|(p, _)| *p == index).map(|(_, slot)| (slot, i)))
            .collect();
        children.sort();
        for (_, child) in children {
            self.explain_node(child, depth + 1, lines);
        }
    }
}
