//! Which of a claim's rows it keeps when they do not all fit its byte budget.
//!
//! A claim's `SELECT` returns its rows in the server's order (by key), not in the batch's
//! sending order (priority, then `time_next`). Cutting at the budget in the server's order
//! would leave out a high-priority row for lower ones that came first. So the claim keeps rows
//! by their place in the batch: the kept rows are always the best-placed ones returned, and a
//! row placed after one already left out is left out too, so that no row goes ahead of a
//! better-placed one that was due with it. The best-placed row is kept however large, so every
//! claim makes progress. Memory stays within the budget plus one row.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The rows a claim keeps, within `budget` bytes. A row is whatever the claim keeps of it (`R`),
/// offered with the bytes it holds.
pub struct ClaimBudget<R> {
    budget: usize,
    bytes: usize,
    /// Worst-placed on top, the first to go when the budget is exceeded.
    kept: BinaryHeap<Placed<R>>,
    /// The best place of any row left out: rows placed after it are left out too.
    cutoff: usize,
    left_out: Vec<Box<[u8]>>,
    offered: usize,
}

/// A kept row: its place in the batch (ties, which well-formed batches do not have, in the
/// order the rows came), its key, the row and its size.
struct Placed<R> {
    place: (usize, usize),
    key: Box<[u8]>,
    row: R,
    size: usize,
}

impl<R> PartialEq for Placed<R> {
    fn eq(&self, other: &Self) -> bool {
        self.place == other.place
    }
}

impl<R> Eq for Placed<R> {}

impl<R> PartialOrd for Placed<R> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<R> Ord for Placed<R> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.place.cmp(&other.place)
    }
}

/// A row the claim keeps: its place in the batch, its key, the row.
pub type KeptRow<R> = (usize, Box<[u8]>, R);

impl<R> ClaimBudget<R> {
    pub fn new(budget: usize) -> ClaimBudget<R> {
        ClaimBudget {
            budget,
            bytes: 0,
            kept: BinaryHeap::new(),
            cutoff: usize::MAX,
            left_out: Vec::new(),
            offered: 0,
        }
    }

    /// Takes the row with `key`, placed `place` in the batch's sending order (0 first), holding
    /// `size` bytes.
    pub fn offer(&mut self, place: usize, key: Box<[u8]>, row: R, size: usize) {
        let place = (place, self.offered);
        self.offered += 1;
        if place.0 > self.cutoff && !self.kept.is_empty() {
            self.left_out.push(key);
            return;
        }
        self.bytes += size;
        self.kept.push(Placed {
            place,
            key,
            row,
            size,
        });
        while self.bytes > self.budget && self.kept.len() > 1 {
            let worst = self.kept.pop().expect("more than one row is kept");
            self.bytes -= worst.size;
            self.cutoff = self.cutoff.min(worst.place.0);
            self.left_out.push(worst.key);
        }
    }

    /// The kept rows in the batch's sending order, and the keys of the rows left out.
    pub fn finish(self) -> (Vec<KeptRow<R>>, Vec<Box<[u8]>>) {
        let kept = self
            .kept
            .into_sorted_vec()
            .into_iter()
            .map(|p| (p.place.0, p.key, p.row))
            .collect();
        (kept, self.left_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offers rows given as (place, size) in that order; returns the kept places in order and
    /// the left-out places (their keys are their places).
    fn run(budget: usize, rows: &[(usize, usize)]) -> (Vec<usize>, Vec<usize>) {
        let mut b = ClaimBudget::new(budget);
        for &(place, size) in rows {
            let key: Box<[u8]> = place.to_string().into_bytes().into();
            b.offer(place, key, (), size);
        }
        let (kept, left_out) = b.finish();
        let place_of = |k: &[u8]| std::str::from_utf8(k).unwrap().parse().unwrap();
        let mut left: Vec<usize> = left_out.iter().map(|k| place_of(k)).collect();
        left.sort();
        (kept.iter().map(|(p, _, _)| *p).collect(), left)
    }

    #[test]
    fn everything_within_the_budget_is_kept_in_sending_order() {
        assert_eq!(
            run(100, &[(2, 10), (0, 10), (1, 10)]),
            (vec![0, 1, 2], vec![])
        );
    }

    #[test]
    fn the_best_placed_rows_are_kept_whatever_order_they_come_in() {
        // The server returns them by key; the batch wants 0, 1, 2, 3.
        assert_eq!(
            run(25, &[(3, 10), (2, 10), (1, 10), (0, 10)]),
            (vec![0, 1], vec![2, 3])
        );
        assert_eq!(
            run(25, &[(0, 10), (3, 10), (1, 10), (2, 10)]),
            (vec![0, 1], vec![2, 3])
        );
    }

    #[test]
    fn a_row_placed_after_one_left_out_is_left_out_even_if_it_would_fit() {
        // 1 did not fit beside 0; 2 would, but must not go ahead of 1.
        assert_eq!(run(10, &[(0, 6), (1, 6), (2, 3)]), (vec![0], vec![1, 2]));
        // The same when 2 came before 1 and had to make way.
        assert_eq!(run(10, &[(0, 6), (2, 3), (1, 6)]), (vec![0], vec![1, 2]));
    }

    #[test]
    fn the_best_placed_row_is_kept_however_large() {
        assert_eq!(run(10, &[(1, 5), (0, 50)]), (vec![0], vec![1]));
        assert_eq!(run(10, &[(0, 50), (1, 5)]), (vec![0], vec![1]));
        assert_eq!(run(10, &[(3, 50)]), (vec![3], vec![]));
    }
}
