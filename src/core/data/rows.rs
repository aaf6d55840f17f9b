//! Feature storage: borrowed dense row-major matrices and CSR matrices.
//!
//! Solvers are generic over [`Rows`], so the binding layer can hand them numpy / scipy buffers
//! without copying; the trait is what a kernel evaluation needs from a row: iterate its non-zeros,
//! take a dot product with a dense vector, and know its squared norm.

use crate::core::common::error::{Result, SvmError};
use crate::core::simd;

/// Read access to a set of feature rows.
pub trait Rows: Sync {
    fn n_rows(&self) -> usize;
    fn n_cols(&self) -> usize;
    /// Calls `f(column, value)` for every stored entry of row `i` (every column for dense rows).
    fn for_each_nonzero(&self, i: usize, f: impl FnMut(usize, f64));
    /// Dot product of row `i` with a dense vector; columns at or past `v.len()` count as zero, so
    /// test rows may have more features than the training rows the vector came from.
    fn dot_dense(&self, i: usize, v: &[f64]) -> f64;
    /// Dot product of rows `i` and `j` of this matrix: a sorted-index merge of the non-zeros for
    /// CSR rows (no scratch; used when densifying a row would cost more than the merge).
    fn dot_rows(&self, i: usize, j: usize) -> f64;
    /// Number of stored entries of row `i` (n_cols for dense rows).
    fn row_nnz(&self, i: usize) -> usize {
        let mut n = 0;
        self.for_each_nonzero(i, |_, _| n += 1);
        n
    }
    /// Row `i` as a contiguous slice when the storage is dense (None for CSR).
    fn dense_row(&self, _i: usize) -> Option<&[f64]> {
        None
    }
    /// Writes row `i` into `out` (zero-filled first); columns past `out.len()` are dropped.
    fn write_dense(&self, i: usize, out: &mut [f64]) {
        out.fill(0.0);
        self.for_each_nonzero(i, |c, v| {
            if let Some(o) = out.get_mut(c) {
                *o = v;
            }
        });
    }
    /// The row of the outermost matrix that row `i` is (a subset's rows map through their
    /// index): a precomputed kernel's rows are rows of a Gram matrix, whose column for row `i`
    /// is this one.
    fn source_row(&self, i: usize) -> usize {
        i
    }
    /// Squared Euclidean norm of row `i` over all its columns, summed over the non-zeros in
    /// column order: the same arithmetic for dense and CSR rows, so both give identical models.
    fn sq_norm(&self, i: usize) -> f64 {
        let mut s = 0.0;
        self.for_each_nonzero(i, |_, v| s += v * v);
        s
    }
    /// Squared norms of all rows (computed once per fit and cached by the caller).
    fn sq_norms(&self) -> Vec<f64> {
        (0..self.n_rows()).map(|i| self.sq_norm(i)).collect()
    }
}

/// Dense row-major matrix borrowed from a C-contiguous buffer.
#[derive(Debug, Clone, Copy)]
pub struct DenseView<'a> {
    data: &'a [f64],
    n_rows: usize,
    n_cols: usize,
}

impl<'a> DenseView<'a> {
    pub fn new(data: &'a [f64], n_rows: usize, n_cols: usize) -> Result<Self> {
        if n_rows.checked_mul(n_cols) != Some(data.len()) {
            return Err(SvmError::invalid_input(format!(
                "dense buffer of length {} does not hold {n_rows} x {n_cols} values",
                data.len()
            )));
        }
        Ok(DenseView {
            data,
            n_rows,
            n_cols,
        })
    }

    #[inline]
    pub fn row(&self, i: usize) -> &'a [f64] {
        &self.data[i * self.n_cols..(i + 1) * self.n_cols]
    }

    pub fn data(&self) -> &'a [f64] {
        self.data
    }
}

impl Rows for DenseView<'_> {
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    fn n_cols(&self) -> usize {
        self.n_cols
    }
    fn row_nnz(&self, _i: usize) -> usize {
        self.n_cols
    }
    #[inline]
    fn for_each_nonzero(&self, i: usize, mut f: impl FnMut(usize, f64)) {
        for (c, &v) in self.row(i).iter().enumerate() {
            if v != 0.0 {
                f(c, v);
            }
        }
    }
    #[inline]
    fn dot_dense(&self, i: usize, v: &[f64]) -> f64 {
        simd::dot(self.row(i), v)
    }
    #[inline]
    fn dot_rows(&self, i: usize, j: usize) -> f64 {
        simd::dot(self.row(i), self.row(j))
    }
    #[inline]
    fn dense_row(&self, i: usize) -> Option<&[f64]> {
        Some(self.row(i))
    }
    fn write_dense(&self, i: usize, out: &mut [f64]) {
        let row = self.row(i);
        let n = row.len().min(out.len());
        out[..n].copy_from_slice(&row[..n]);
        out[n..].fill(0.0);
    }
}

/// The integer types scipy uses for CSR `indices` / `indptr`.
pub trait SparseIndex: Copy + Send + Sync + 'static {
    fn to_usize(self) -> Option<usize>;
}
impl SparseIndex for i32 {
    #[inline]
    fn to_usize(self) -> Option<usize> {
        usize::try_from(self).ok()
    }
}
impl SparseIndex for i64 {
    #[inline]
    fn to_usize(self) -> Option<usize> {
        usize::try_from(self).ok()
    }
}

/// CSR matrix borrowed from scipy's three arrays (validated once on construction).
#[derive(Debug, Clone, Copy)]
pub struct CsrView<'a, I: SparseIndex> {
    indptr: &'a [I],
    indices: &'a [I],
    values: &'a [f64],
    n_cols: usize,
}

impl<'a, I: SparseIndex> CsrView<'a, I> {
    /// Checks the CSR invariants the unchecked accessors rely on: `indptr` starts at 0, never
    /// decreases and ends at nnz; every column index lies in `[0, n_cols)`.
    pub fn new(
        indptr: &'a [I],
        indices: &'a [I],
        values: &'a [f64],
        n_cols: usize,
    ) -> Result<Self> {
        if indptr.is_empty() {
            return Err(SvmError::invalid_input(
                "CSR indptr must have n_rows + 1 entries",
            ));
        }
        if indices.len() != values.len() {
            return Err(SvmError::invalid_input(format!(
                "CSR indices ({}) and data ({}) differ in length",
                indices.len(),
                values.len()
            )));
        }
        let mut prev = 0usize;
        for (k, p) in indptr.iter().enumerate() {
            let p = p
                .to_usize()
                .ok_or_else(|| SvmError::invalid_input("CSR indptr has a negative entry"))?;
            if (k == 0 && p != 0) || p < prev {
                return Err(SvmError::invalid_input(
                    "CSR indptr must start at 0 and never decrease",
                ));
            }
            prev = p;
        }
        if prev != values.len() {
            return Err(SvmError::invalid_input(format!(
                "CSR indptr ends at {prev} but there are {} stored values",
                values.len()
            )));
        }
        for &c in indices {
            match c.to_usize() {
                Some(c) if c < n_cols => {}
                _ => {
                    return Err(SvmError::invalid_input(format!(
                        "CSR column index out of range [0, {n_cols})"
                    )))
                }
            }
        }
        Ok(CsrView {
            indptr,
            indices,
            values,
            n_cols,
        })
    }

    #[inline]
    fn range(&self, i: usize) -> std::ops::Range<usize> {
        // The constructor checked that every indptr entry converts and is in range.
        let a = self.indptr[i].to_usize().unwrap_or(0);
        let b = self.indptr[i + 1].to_usize().unwrap_or(0);
        a..b
    }

    pub fn values(&self) -> &'a [f64] {
        self.values
    }
}

impl<I: SparseIndex> Rows for CsrView<'_, I> {
    fn n_rows(&self) -> usize {
        self.indptr.len() - 1
    }
    fn n_cols(&self) -> usize {
        self.n_cols
    }
    fn row_nnz(&self, i: usize) -> usize {
        self.range(i).len()
    }
    #[inline]
    fn for_each_nonzero(&self, i: usize, mut f: impl FnMut(usize, f64)) {
        let r = self.range(i);
        for (c, &v) in self.indices[r.clone()].iter().zip(&self.values[r]) {
            f(c.to_usize().unwrap_or(0), v);
        }
    }
    /// A gather over the row's non-zeros with four independent accumulators (one chain of
    /// dependent adds would cost a full add latency per non-zero).
    #[inline]
    fn dot_dense(&self, i: usize, v: &[f64]) -> f64 {
        let r = self.range(i);
        let (idx, val) = (&self.indices[r.clone()], &self.values[r]);
        let w = |c: &I| c.to_usize().and_then(|c| v.get(c)).copied().unwrap_or(0.0);
        let mut acc = [0.0f64; 4];
        let mut ci = idx.chunks_exact(4);
        let mut cv = val.chunks_exact(4);
        for (ck, vk) in (&mut ci).zip(&mut cv) {
            for l in 0..4 {
                acc[l] += vk[l] * w(&ck[l]);
            }
        }
        let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        for (c, x) in ci.remainder().iter().zip(cv.remainder()) {
            s += x * w(c);
        }
        s
    }
    fn dot_rows(&self, i: usize, j: usize) -> f64 {
        let (ra, rb) = (self.range(i), self.range(j));
        let (ia, va) = (&self.indices[ra.clone()], &self.values[ra]);
        let (ib, vb) = (&self.indices[rb.clone()], &self.values[rb]);
        let (mut a, mut b, mut s) = (0, 0, 0.0);
        // Indices are sorted (the constructor's callers normalise CSR to canonical form).
        while a < ia.len() && b < ib.len() {
            let (ca, cb) = (ia[a].to_usize(), ib[b].to_usize());
            match ca.cmp(&cb) {
                std::cmp::Ordering::Less => a += 1,
                std::cmp::Ordering::Greater => b += 1,
                std::cmp::Ordering::Equal => {
                    s += va[a] * vb[b];
                    a += 1;
                    b += 1;
                }
            }
        }
        s
    }
}

/// Any of the supported storages behind one type, so code that takes its input at run time (the
/// Python binding) compiles each solver once; the match per row is a predictable branch.
#[derive(Debug, Clone, Copy)]
pub enum AnyRows<'a> {
    Dense(DenseView<'a>),
    Csr32(CsrView<'a, i32>),
    Csr64(CsrView<'a, i64>),
}

macro_rules! dispatch {
    ($self:expr, $r:ident => $e:expr) => {
        match $self {
            AnyRows::Dense($r) => $e,
            AnyRows::Csr32($r) => $e,
            AnyRows::Csr64($r) => $e,
        }
    };
}

impl Rows for AnyRows<'_> {
    fn n_rows(&self) -> usize {
        dispatch!(self, r => r.n_rows())
    }
    fn n_cols(&self) -> usize {
        dispatch!(self, r => r.n_cols())
    }
    #[inline]
    fn for_each_nonzero(&self, i: usize, f: impl FnMut(usize, f64)) {
        dispatch!(self, r => r.for_each_nonzero(i, f))
    }
    #[inline]
    fn dot_dense(&self, i: usize, v: &[f64]) -> f64 {
        dispatch!(self, r => r.dot_dense(i, v))
    }
    #[inline]
    fn dot_rows(&self, i: usize, j: usize) -> f64 {
        dispatch!(self, r => r.dot_rows(i, j))
    }
    fn row_nnz(&self, i: usize) -> usize {
        dispatch!(self, r => r.row_nnz(i))
    }
    #[inline]
    fn dense_row(&self, i: usize) -> Option<&[f64]> {
        dispatch!(self, r => r.dense_row(i))
    }
    fn write_dense(&self, i: usize, out: &mut [f64]) {
        dispatch!(self, r => r.write_dense(i, out))
    }
    fn sq_norm(&self, i: usize) -> f64 {
        dispatch!(self, r => r.sq_norm(i))
    }
}

/// The rows `index[0], index[1], ...` of another matrix, without copying (the training set of one
/// pair of classes in one-vs-one training).
#[derive(Debug, Clone, Copy)]
pub struct SubsetRows<'a, R: Rows> {
    base: &'a R,
    index: &'a [usize],
}

impl<'a, R: Rows> SubsetRows<'a, R> {
    /// Fails if an index is out of range.
    pub fn new(base: &'a R, index: &'a [usize]) -> Result<Self> {
        if let Some(&bad) = index.iter().find(|&&i| i >= base.n_rows()) {
            return Err(SvmError::invalid_input(format!(
                "row index {bad} out of range for {} rows",
                base.n_rows()
            )));
        }
        Ok(SubsetRows { base, index })
    }
}

impl<R: Rows> Rows for SubsetRows<'_, R> {
    fn n_rows(&self) -> usize {
        self.index.len()
    }
    fn n_cols(&self) -> usize {
        self.base.n_cols()
    }
    fn row_nnz(&self, i: usize) -> usize {
        self.base.row_nnz(self.index[i])
    }
    #[inline]
    fn for_each_nonzero(&self, i: usize, f: impl FnMut(usize, f64)) {
        self.base.for_each_nonzero(self.index[i], f)
    }
    #[inline]
    fn dot_dense(&self, i: usize, v: &[f64]) -> f64 {
        self.base.dot_dense(self.index[i], v)
    }
    #[inline]
    fn dot_rows(&self, i: usize, j: usize) -> f64 {
        self.base.dot_rows(self.index[i], self.index[j])
    }
    #[inline]
    fn dense_row(&self, i: usize) -> Option<&[f64]> {
        self.base.dense_row(self.index[i])
    }
    fn write_dense(&self, i: usize, out: &mut [f64]) {
        self.base.write_dense(self.index[i], out)
    }
    fn source_row(&self, i: usize) -> usize {
        self.base.source_row(self.index[i])
    }
    fn sq_norm(&self, i: usize) -> f64 {
        self.base.sq_norm(self.index[i])
    }
}

/// The largest squared norm a row may have: kernel values come from |x|^2 + |z|^2 - 2 <x, z>,
/// which stays finite for any two rows below it (|x - z|^2 <= 4 max(|x|^2, |z|^2)).
pub const MAX_SQ_NORM: f64 = f64::MAX / 4.0;

/// Squared norms of all rows, rejecting any above [`MAX_SQ_NORM`] (feature values near 1e154 or
/// above), since every kernel value is computed from them.
pub fn finite_sq_norms<R: Rows>(x: &R, what: &str) -> Result<Vec<f64>> {
    let norms = x.sq_norms();
    check_sq_norms(&norms, what)?;
    Ok(norms)
}

/// The check of [`finite_sq_norms`] on norms computed elsewhere (a model's support vectors).
pub fn check_sq_norms(norms: &[f64], what: &str) -> Result<()> {
    match norms.iter().position(|v| v.is_nan() || *v > MAX_SQ_NORM) {
        None => Ok(()),
        Some(i) => Err(SvmError::invalid_input(format!(
            "{what} row {i}: its squared norm {:e} is above {MAX_SQ_NORM:e}, where kernel values \
             overflow; the feature values are too large, rescale them",
            norms[i]
        ))),
    }
}

/// Variance of all entries (zeros included) of an n x d matrix, as numpy's `X.var()` defines
/// it, computed in one fixed order over the non-zeros so dense and CSR inputs give the same bits
/// (the 'scale' gamma must not depend on the storage format).
pub fn entry_variance<R: Rows>(x: &R) -> f64 {
    let count = (x.n_rows() * x.n_cols()) as f64;
    if count == 0.0 {
        return 0.0;
    }
    let mut sum = 0.0;
    let mut nonzeros = 0usize;
    for i in 0..x.n_rows() {
        x.for_each_nonzero(i, |_, v| {
            if v != 0.0 {
                sum += v;
                nonzeros += 1;
            }
        });
    }
    let mean = sum / count;
    let mut squares = 0.0;
    for i in 0..x.n_rows() {
        x.for_each_nonzero(i, |_, v| {
            if v != 0.0 {
                squares += (v - mean) * (v - mean);
            }
        });
    }
    let zeros = count - nonzeros as f64;
    (squares + zeros * mean * mean) / count
}

/// Rejects NaN and infinities with a message that says where the first one is. Large arrays
/// (a precomputed Gram matrix is n^2 values) are scanned in parallel chunks.
pub fn check_finite(values: &[f64], what: &str) -> Result<()> {
    const CHUNK: usize = 1 << 16;
    let first_bad = if values.len() > 16 * CHUNK {
        use rayon::prelude::*;
        crate::core::common::parallel::install(|| {
            values
                .par_chunks(CHUNK)
                .enumerate()
                .find_first(|(_, c)| c.iter().any(|v| !v.is_finite()))
                .and_then(|(k, c)| c.iter().position(|v| !v.is_finite()).map(|p| k * CHUNK + p))
        })
    } else {
        values.iter().position(|v| !v.is_finite())
    };
    match first_bad {
        None => Ok(()),
        Some(k) => Err(SvmError::invalid_input(format!(
            "{what} contains NaN or infinity (value {} at flat position {k})",
            values[k]
        ))),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The CSR parts (i32 indices) of a dense row-major matrix of `d` columns: its non-zeros,
    /// row by row.
    pub(crate) fn csr_parts(dense: &[f64], d: usize) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
        let mut indptr = vec![0i32];
        let (mut indices, mut values) = (vec![], vec![]);
        for row in dense.chunks(d) {
            for (c, &v) in row.iter().enumerate() {
                if v != 0.0 {
                    indices.push(c as i32);
                    values.push(v);
                }
            }
            indptr.push(indices.len() as i32);
        }
        (indptr, indices, values)
    }

    #[test]
    fn dense_and_csr_agree() {
        // [[1, 0, 2], [0, 0, 0], [0, 3, 0]]
        let dense = [1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0];
        let d = DenseView::new(&dense, 3, 3).unwrap();
        let indptr = [0i64, 2, 2, 3];
        let indices = [0i64, 2, 1];
        let values = [1.0, 2.0, 3.0];
        let s = CsrView::new(&indptr, &indices, &values, 3).unwrap();
        let v = [0.5, -1.0, 2.0];
        for i in 0..3 {
            assert_eq!(d.dot_dense(i, &v), s.dot_dense(i, &v));
            assert_eq!(d.sq_norm(i), s.sq_norm(i));
            let (mut a, mut b) = ([9.0; 3], [9.0; 3]);
            d.write_dense(i, &mut a);
            s.write_dense(i, &mut b);
            assert_eq!(a, b);
        }
        // A shorter vector: the missing features are zero.
        assert_eq!(s.dot_dense(0, &[2.0]), 2.0);
        for i in 0..3 {
            for j in 0..3 {
                assert_eq!(d.dot_rows(i, j), s.dot_rows(i, j));
            }
        }
        let idx = [2usize, 0, 2];
        let sub = SubsetRows::new(&s, &idx).unwrap();
        assert_eq!(sub.n_rows(), 3);
        assert_eq!(sub.dot_rows(0, 1), 0.0);
        assert_eq!(sub.dot_rows(0, 2), 9.0);
        assert_eq!(sub.sq_norm(1), 5.0);
        assert!(SubsetRows::new(&s, &[3]).is_err());
    }

    #[test]
    fn entry_variance_is_numpy_var_and_format_independent() {
        let dense = [1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0];
        let d = DenseView::new(&dense, 3, 3).unwrap();
        let s = CsrView::new(&[0i64, 2, 2, 3], &[0i64, 2, 1], &[1.0, 2.0, 3.0], 3).unwrap();
        let mean = 6.0 / 9.0;
        let var = dense.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 9.0;
        assert!((entry_variance(&d) - var).abs() < 1e-15);
        assert_eq!(entry_variance(&d).to_bits(), entry_variance(&s).to_bits());
        let huge = [1e200, 1e200];
        assert!(finite_sq_norms(&DenseView::new(&huge, 1, 2).unwrap(), "X").is_err());
    }

    #[test]
    fn csr_validation_rejects_broken_structure() {
        let v = [1.0, 2.0];
        assert!(CsrView::new(&[0i32, 2, 1], &[0, 1], &v, 2).is_err());
        assert!(CsrView::new(&[1i32, 2], &[0, 1], &v, 2).is_err());
        assert!(CsrView::new(&[0i32, 1], &[0, 1], &v, 2).is_err());
        assert!(CsrView::new(&[0i32, 2], &[0, 5], &v, 2).is_err());
        assert!(CsrView::new(&[0i32, 2], &[-1, 1], &v, 2).is_err());
        assert!(CsrView::<i32>::new(&[], &[], &[], 2).is_err());
        assert!(DenseView::new(&v, 3, 1).is_err());
    }
}
