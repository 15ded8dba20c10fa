//! Where rows are among a view's shards: each node of a stream plan says where its output rows
//! are ([`Distribution`], derived once when the node is planned) and what it requires of each
//! input ([`Requirement`], from its spec); `enforce` puts an exchange wherever the two differ.

use std::sync::Arc;

use datafusion::physical_expr::PhysicalExpr;

/// Where a node's output rows are among a view's shards.
#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    /// All in shard 0 (a view's inputs, a global aggregate).
    Single,
    /// In any shard.
    Any,
    /// Rows with equal values in these output columns are in one shard, `vnode % shards`.
    Hash(Vec<usize>),
}

impl Distribution {
    /// Where the rows are after a projection that passes input column `c` on unchanged as
    /// output column `moved(c)` (None: it is dropped or computed over).
    pub fn through_projection(&self, moved: impl Fn(usize) -> Option<usize>) -> Distribution {
        match self {
            Distribution::Hash(columns) => match columns.iter().map(|&c| moved(c)).collect::<Option<Vec<_>>>() {
                Some(columns) => Distribution::Hash(columns),
                None => Distribution::Any,
            },
            other => other.clone(),
        }
    }
}

/// Where a node needs an input's rows.
#[derive(Clone)]
pub enum Requirement {
    /// Anywhere: the node works on each row alone.
    Any,
    /// All in shard 0.
    Single,
    /// Rows with equal `keys` in one shard. `columns`: the input columns the keys are, when
    /// they are plain columns (rows already hashed by exactly those columns stay put).
    Hash { keys: Vec<Arc<dyn PhysicalExpr>>, columns: Option<Vec<usize>> },
}

impl Requirement {
    pub fn hash(keys: Vec<Arc<dyn PhysicalExpr>>, columns: Option<Vec<usize>>) -> Requirement {
        Requirement::Hash { keys, columns }
    }

    /// Whether rows distributed as `distribution` already are where this requires.
    pub fn satisfied_by(&self, distribution: &Distribution) -> bool {
        match self {
            Requirement::Any => true,
            Requirement::Single => *distribution == Distribution::Single,
            Requirement::Hash { columns: Some(columns), .. } => *distribution == Distribution::Hash(columns.clone()),
            Requirement::Hash { columns: None, .. } => false,
        }
    }

    /// The key rows are routed to shards by: none for shard 0.
    pub fn keys(&self) -> Vec<Arc<dyn PhysicalExpr>> {
        match self {
            Requirement::Hash { keys, .. } => keys.clone(),
            Requirement::Any | Requirement::Single => Vec::new(),
        }
    }

    /// Where rows are after an exchange to this requirement.
    pub fn distribution(&self) -> Distribution {
        match self {
            Requirement::Any => Distribution::Any,
            Requirement::Single => Distribution::Single,
            Requirement::Hash { columns: Some(columns), .. } => Distribution::Hash(columns.clone()),
            Requirement::Hash { columns: None, .. } => Distribution::Any,
        }
    }
}
