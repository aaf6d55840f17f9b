//! The subsample a solve on many rows starts from: one row in `SAMPLE_STEP`, picked by a hash of
//! its index, copied in one pass.

use crate::core::common::error::Result;
use crate::core::common::rng::mix;
use crate::core::data::rows::{AnyRows, CsrView, DenseView, Rows};

use super::rows::RowSource;

/// A solve whose subsample of one row in `SAMPLE_STEP` (`in_sample`) still gives
/// `SAMPLE_ROWS_PER_SV` rows per support vector first solves on those rows (C scaled by the
/// rows' ratio, so the loss weighs as much against the regulariser) and starts from that
/// solution: the iterations that cross from the budgeted pass's coefficients to near the
/// optimum, most of them, then cost a fifth. The subsample's solve does the same in turn, and
/// stops at `SAMPLE_TOL`: a start, not the answer (200,000 hard10d rows, B = 3,000: the full
/// solve's first step still lowers the objective by 7%, and 1e-4 bought only one more
/// direction, 31 products, that ended the solve without a step). The subsample of a file is
/// copied only while it takes at most a quarter of `polish_cache_size` (its rows stay a chunk
/// at a time otherwise); of rows in memory, always. Hessian-free, 1,000,000 hard10d rows,
/// B = 2,000: 10 iterations on all rows became 3. The Newton system's solve starts so where
/// its rows are at least m^2: the million-row checkerboard of docs/polish.md (B = 200) 17
/// iterations on all rows -> 3, its polish 6.1 -> 1.9 s; where the factorisations weigh more
/// it does not pay (a9a, ijcnn1, w8a, cod-rna at B = 500: as many iterations or more, each as
/// dear).
pub(super) const SAMPLE_STEP: usize = 5;
/// Rows per support vector from which a solve below `hessian_free_basis` probes the
/// Hessian-free path on its subsample (see `solve::sample_start`). Where the squared rows are
/// many and the preconditioner good, products are far cheaper than forming the system:
/// hardmc's class pairs, 158,599 rows at B = 800, 4.9 s -> 1.1 s, 528,459 rows at B = 1,267
/// the whole one-vs-one fit on 1,000,000 rows 79 -> 40 s. Where the subsample needs many
/// products the system stays, but the probe's subsample solve is then spent: a9a and ijcnn1 at
/// B = 500 (65 and 100 rows per vector) 0.56 -> 0.74 s and 0.69 -> 1.04 s with a probe from
/// 50 rows per vector, so it starts at 200.
pub(super) const PROBE_ROWS_PER_SV: usize = 200;
pub(super) const SAMPLE_ROWS_PER_SV: usize = 10;
pub(super) const SAMPLE_TOL: f64 = 1e-3;

/// Whether row `row` is in the subsample a solve starts from: one row in `SAMPLE_STEP`, picked by
/// a hash of its index, since a stride aliases with data stored in a period (ijcnn1's first ten
/// columns cycle through their values every ten rows: every fifth row saw two of them, and its
/// solution started the solve on all rows at 7 times the optimum's objective).
pub(super) fn in_sample(row: usize) -> bool {
    mix(row as u64).is_multiple_of(SAMPLE_STEP as u64)
}

/// The rows of a source `in_sample`, copied in one pass: dense when the source's first block
/// is, CSR otherwise.
pub(super) struct RowSample {
    /// The copy outgrew its bound (and stopped growing).
    too_big: bool,
    pub(super) n_rows: usize,
    n_cols: usize,
    dense: Option<Vec<f64>>,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    values: Vec<f64>,
}

impl RowSample {
    /// None when the copy would take more than `max_bytes` (a file read in chunks keeps its
    /// promise of memory for one chunk, not a fifth of the file).
    pub(super) fn take(source: &mut dyn RowSource, max_bytes: usize) -> Result<Option<Self>> {
        let n_cols = source.n_cols();
        let mut sample = RowSample {
            too_big: false,
            n_rows: 0,
            n_cols,
            dense: None,
            indptr: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
        };
        let mut first_block = true;
        source.pass(&mut |first, rows| {
            if first_block {
                first_block = false;
                if matches!(rows, AnyRows::Dense(_)) {
                    sample.dense = Some(Vec::new());
                }
            }
            for i in (0..rows.n_rows()).filter(|&i| in_sample(first + i)) {
                if sample.too_big {
                    break;
                }
                sample.n_rows += 1;
                if let Some(dense) = &mut sample.dense {
                    let at = dense.len();
                    dense.resize(at + n_cols, 0.0);
                    rows.write_dense(i, &mut dense[at..]);
                } else {
                    rows.for_each_nonzero(i, |c, v| {
                        if v != 0.0 && c < n_cols {
                            sample.indices.push(c as i64);
                            sample.values.push(v);
                        }
                    });
                    sample.indptr.push(sample.values.len() as i64);
                }
                let bytes = sample.dense.as_ref().map_or(0, |d| d.len() * 8)
                    + sample.values.len() * 16
                    + sample.indptr.len() * 8;
                sample.too_big = bytes > max_bytes;
            }
            Ok(())
        })?;
        Ok((!sample.too_big).then_some(sample))
    }

    pub(super) fn rows(&self) -> Result<AnyRows<'_>> {
        Ok(match &self.dense {
            Some(dense) => AnyRows::Dense(DenseView::new(dense, self.n_rows, self.n_cols)?),
            None => AnyRows::Csr64(CsrView::new(
                &self.indptr,
                &self.indices,
                &self.values,
                self.n_cols,
            )?),
        })
    }
}
