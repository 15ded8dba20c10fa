//! PostgreSQL's ordered-set aggregates that DataFusion lacks, as one rule each over a group's
//! values in order: `percentile_disc(f) WITHIN GROUP (ORDER BY x)` and `mode() WITHIN GROUP
//! (ORDER BY x)`. Shared by the batch side (`frontend::ordered_set_aggregates`, DataFusion
//! aggregate functions) and the views' aggregate (`operators::hash_agg`), so a view and its
//! query pick the same value.

/// The position `percentile_disc(fraction)` takes among `n` values in order: the first whose
/// place in the ordering reaches the fraction (PostgreSQL's rule); None without values.
pub fn percentile_disc_index(n: usize, fraction: f64) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let reach = (fraction * n as f64).ceil() as usize;
    Some(reach.saturating_sub(1).min(n - 1))
}

/// The most frequent of `values` (in order, equal ones together), the first in order among
/// equally frequent ones; None without values.
pub fn mode<T: PartialEq>(values: &[T]) -> Option<&T> {
    let mut best: Option<(&T, usize)> = None;
    let mut run_start = 0;
    for i in 1..=values.len() {
        if i == values.len() || values[i] != values[run_start] {
            let run = i - run_start;
            if best.is_none_or(|(_, n)| run > n) {
                best = Some((&values[run_start], run));
            }
            run_start = i;
        }
    }
    best.map(|(value, _)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_disc_takes_the_first_value_reaching_the_fraction() {
        // PostgreSQL: percentile_disc(0.5) of 1..4 is 2, of 1..5 is 3; 0 is the first, 1 the last.
        assert_eq!(percentile_disc_index(4, 0.5), Some(1));
        assert_eq!(percentile_disc_index(5, 0.5), Some(2));
        assert_eq!(percentile_disc_index(5, 0.0), Some(0));
        assert_eq!(percentile_disc_index(5, 1.0), Some(4));
        assert_eq!(percentile_disc_index(0, 0.5), None);
    }

    #[test]
    fn mode_is_the_most_frequent_and_the_first_of_a_tie() {
        assert_eq!(mode(&[1, 2, 2, 3, 3]), Some(&2));
        assert_eq!(mode(&[1, 3, 3, 3]), Some(&3));
        assert_eq!(mode::<i32>(&[]), None);
    }
}
