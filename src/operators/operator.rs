//! The contract between an operator and the runtime that drives it (`dataflow::job`).
//!
//! The runtime owns the loop: it feeds each input's changes to [`Operator::apply`], aligns
//! barriers, and at each barrier calls [`Operator::on_barrier`] on every operator, children
//! before parents, passing what each returns to its parent. Operators never see channels,
//! barriers or the store: they only turn changes into changes.

use crate::error::Result;
use crate::state::store::WriteBatch;
use crate::types::ChangeBatch;

pub trait Operator: Send {
    /// A one-line description for EXPLAIN and logs.
    fn describe(&self) -> String;

    /// Takes changes on input `input` (0 for single-input operators) and returns the changes
    /// of this operator's output they cause now.
    fn apply(&mut self, input: usize, batch: ChangeBatch) -> Result<Vec<ChangeBatch>>;

    /// The epoch is complete: returns output changes held back until now (aggregates emit
    /// their groups' new values once per epoch).
    fn on_barrier(&mut self) -> Result<Vec<ChangeBatch>> {
        Ok(vec![])
    }

    /// Adds the epoch's state changes to the epoch's write batch (after `on_barrier`).
    fn flush_state(&mut self, _wb: &mut WriteBatch) {}
}
