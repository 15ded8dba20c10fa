//! What every scalar function written here needs first: its arguments as arrays. A leaf of the
//! frontend (it imports nothing of Weir), so the functions' files depend on it and not on the
//! planner that registers them (`df_context`, `pg_catalog`).

use datafusion::logical_expr::ColumnarValue;

/// A scalar function's arguments as arrays of the batch's length (scalars repeated), with that
/// length; what every function written here needs first.
pub fn argument_arrays(
    args: &[ColumnarValue],
) -> datafusion::error::Result<(usize, Vec<datafusion::arrow::array::ArrayRef>)> {
    let rows = args
        .iter()
        .find_map(|a| match a {
            ColumnarValue::Array(a) => Some(a.len()),
            ColumnarValue::Scalar(_) => None,
        })
        .unwrap_or(1);
    let arrays = args.iter().map(|a| a.clone().into_array(rows)).collect::<datafusion::error::Result<Vec<_>>>()?;
    Ok((rows, arrays))
}
