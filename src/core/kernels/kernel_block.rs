//! Kernel blocks K(X, S): the kernel values of blocks of rows of X against a fixed set
//! S (a model's support vectors, the polish's basis, the Y of `kernel_matrix`), and the decision
//! values of a kernel expansion over S. Written once here and shared by every prediction path
//! (BudgetSVC, KernelSVC one-vs-one, the Dask and command-line predictions), the polish
//! (`budgeted::polish`) and `kernel_matrix` here.
//!
//! S is copied once feature-major (feature c of vector j at `t[c * n + j]`), and a block is
//! computed a chunk of S at a time, each chunk an L2-sized slice of the copy that all rows of the
//! block meet in turn. Within a chunk, rows go in groups of eight through the register-blocked
//! `simd::dots_8_rows` (the group's dot products with 16 vectors held in registers across the
//! columns, like a matrix product's micro-kernel) when the rows are dense enough, else one at a
//! time through the fused `simd::rbf_row` (one row's dots with 32 vectors in registers across
//! its non-zeros only: sparse rows such as a9a's 14 of 123). Wide sparse S (text with millions
//! of columns) is kept as an inverted column index instead, whose cost follows the non-zeros.
//! Kernel values come from the dots through `Kernel::from_dots` (for the Gaussian kernel
//! `simd::rbf_from_dots`, or its fused form in `rbf_row`): the same function as training. The
//! other kernels take the one-row path as plain dots (one vectorised axpy per non-zero of the
//! row over the chunk) and then their function.

use std::ops::Range;

use rayon::prelude::*;

use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;
use crate::core::data::rows::{DenseView, Rows};
use crate::core::data::sparse::ColumnIndex;
use crate::core::data::sv_matrix::SvMatrix;
use crate::core::kernels::kernel::{check_gamma, Kernel};
use crate::core::simd;

/// Bytes of the feature-major copy in one chunk: the slice a block of rows reuses from L2.
const CHUNK_BYTES: usize = 192 << 10;
/// The feature-major copy is made up to this size; larger (wide sparse) S is indexed by column.
const COPY_MAX_BYTES: usize = 256 << 20;
/// Rows of one parallel work item.
pub const BLOCK_ROWS: usize = 32;
/// A group of eight rows takes the register-blocked dots when they cost at most this many times
/// the multiply-adds of the rows' own non-zeros (the blocked kernel also multiplies the zeros of
/// columns that another row of the group uses, but holds its sums in registers).
const BLOCKED_FMA_RATIO: usize = 3;

/// The rows a block is filled for: rows `rows` of `x`, their squared norms `x_norms` (one per
/// row of the range).
struct BlockRows<'a, R> {
    x: &'a R,
    rows: Range<usize>,
    x_norms: &'a [f64],
}

/// What a block's fill ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    /// The kernel values.
    Kernel,
    /// The dot products (the caller applies the kernel: in f32).
    Dots,
}

/// How S is stored for its blocks.
#[derive(Debug, Clone)]
enum BasisStore {
    /// Feature c of vector j at `t[c * n_basis + j]`.
    FeatureMajor(Vec<f64>),
    /// By column: each column present lists its (vector, value) pairs.
    Columns(ColumnIndex),
}

/// S prepared for kernel blocks: its squared norms, the kernel width and its storage.
#[derive(Debug, Clone)]
pub struct KernelBlocks {
    kernel: Kernel,
    n_basis: usize,
    dim: usize,
    sq_norms: Vec<f64>,
    store: BasisStore,
    /// Vectors of S per chunk.
    chunk: usize,
}

/// Scratch of one worker (kept between blocks: nothing is allocated per row).
#[derive(Debug, Default)]
pub struct BlockScratch {
    /// Eight densified rows.
    q: Vec<f64>,
    /// The union of a group's non-zero columns.
    cols: Vec<usize>,
    /// A row's non-zeros.
    row_cols: Vec<usize>,
    row_vals: Vec<f64>,
    /// Kernel values of a block against one chunk.
    values: Vec<f64>,
}

/// The support vectors of a model as `Rows`.
pub struct SvRows<'a> {
    sv: &'a SvMatrix,
    n_sv: usize,
    dim: usize,
}

impl Rows for SvRows<'_> {
    fn n_rows(&self) -> usize {
        self.n_sv
    }
    fn n_cols(&self) -> usize {
        self.dim
    }
    fn for_each_nonzero(&self, i: usize, mut f: impl FnMut(usize, f64)) {
        match self.sv {
            SvMatrix::Dense(v) => {
                for (c, &x) in v[i * self.dim..(i + 1) * self.dim].iter().enumerate() {
                    if x != 0.0 {
                        f(c, x)
                    }
                }
            }
            SvMatrix::Sparse {
                indptr,
                indices,
                values,
            } => {
                for k in indptr[i]..indptr[i + 1] {
                    f(indices[k] as usize, values[k]);
                }
            }
        }
    }
    fn dot_dense(&self, i: usize, v: &[f64]) -> f64 {
        let mut s = 0.0;
        self.for_each_nonzero(i, |c, x| s += x * v.get(c).copied().unwrap_or(0.0));
        s
    }
    fn dot_rows(&self, i: usize, j: usize) -> f64 {
        let mut a = Vec::new();
        self.for_each_nonzero(i, |c, x| a.push((c, x)));
        let mut s = 0.0;
        self.for_each_nonzero(j, |c, x| {
            if let Ok(k) = a.binary_search_by_key(&c, |e| e.0) {
                s += a[k].1 * x;
            }
        });
        s
    }
}

/// A model's support vectors (n_sv rows of `dim` features) as `Rows`.
pub fn sv_rows(sv: &SvMatrix, n_sv: usize, dim: usize) -> SvRows<'_> {
    SvRows { sv, n_sv, dim }
}

impl KernelBlocks {
    /// S given as rows (dense or sparse). Its squared norms are not checked here: callers that
    /// need finite kernel values check them (`data::check_sq_norms`).
    pub fn new<S: Rows>(basis: &S, gamma: f64) -> Result<Self> {
        Self::with_kernel(basis, Kernel::rbf(gamma))
    }

    /// S with any kernel but a precomputed one (whose values are given, not computed).
    pub fn with_kernel<S: Rows>(basis: &S, kernel: Kernel) -> Result<Self> {
        kernel.check()?;
        if kernel == Kernel::Precomputed {
            return Err(SvmError::invalid_input(
                "a precomputed kernel has no kernel blocks: its values are given",
            ));
        }
        let (n, dim) = (basis.n_rows(), basis.n_cols());
        let sq_norms = basis.sq_norms();
        let copy_bytes = n.checked_mul(dim).and_then(|c| c.checked_mul(8));
        let store = match copy_bytes {
            Some(bytes) if bytes <= COPY_MAX_BYTES && prefer_copy(basis) => {
                let mut t = Vec::new();
                t.try_reserve_exact(n * dim).map_err(|_| {
                    SvmError::invalid_input("not enough memory for the support vectors' copy")
                })?;
                t.resize(n * dim, 0.0);
                for j in 0..n {
                    basis.for_each_nonzero(j, |c, v| {
                        if c < dim {
                            t[c * n + j] = v;
                        }
                    });
                }
                BasisStore::FeatureMajor(t)
            }
            _ => BasisStore::Columns(ColumnIndex::from_rows(basis)),
        };
        let chunk = match store {
            BasisStore::FeatureMajor(_) => {
                let per_vector = 8 * dim.max(1);
                (CHUNK_BYTES / per_vector).max(64).next_multiple_of(16)
            }
            BasisStore::Columns(_) => n,
        }
        .min(n)
        .max(1);
        Ok(KernelBlocks {
            kernel,
            n_basis: n,
            dim,
            sq_norms,
            store,
            chunk,
        })
    }

    /// A model's support vectors (n_sv rows of `dim` features).
    pub fn from_sv_matrix(sv: &SvMatrix, n_sv: usize, dim: usize, kernel: Kernel) -> Result<Self> {
        match sv {
            SvMatrix::Dense(v) => Self::with_kernel(&DenseView::new(v, n_sv, dim)?, kernel),
            SvMatrix::Sparse { .. } => Self::with_kernel(&SvRows { sv, n_sv, dim }, kernel),
        }
    }

    /// |S|.
    pub fn n_basis(&self) -> usize {
        self.n_basis
    }

    /// Squared norms of the vectors of S.
    pub fn sq_norms(&self) -> &[f64] {
        &self.sq_norms
    }

    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The chunks of S a block is computed in (fixed for S: sums over S taken chunk by chunk
    /// are the same whatever the rows and threads).
    pub fn chunks(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.chunks_of(self.chunk)
    }

    fn chunks_of(&self, len: usize) -> impl Iterator<Item = Range<usize>> + '_ {
        (0..self.n_basis)
            .step_by(len.max(1))
            .map(move |j0| j0..(j0 + len).min(self.n_basis))
    }

    /// The chunk length for rows like `x`'s: a block of sparse rows reads only the copy's columns
    /// where its rows are non-zero, so the L2-sized slice can hold more vectors (about 4 x the
    /// mean non-zeros of a row are the hot columns of a block). Short chunks on sparse rows would
    /// spend more on each call's set-up than on the arithmetic (w8a: 12 non-zeros of 300).
    /// Depends only on `x` and S, never on the threads.
    fn chunk_for<R: Rows>(&self, x: &R) -> usize {
        let BasisStore::FeatureMajor(_) = self.store else {
            return self.chunk;
        };
        let n = x.n_rows().max(1);
        let nnz: usize = (0..x.n_rows()).map(|i| x.row_nnz(i)).sum();
        let hot = (4 * nnz / n).clamp(1, self.dim.max(1));
        (CHUNK_BYTES / (8 * hot))
            .max(64)
            .next_multiple_of(16)
            .clamp(self.chunk, self.n_basis.max(1))
    }

    /// Kernel values of rows `rows` of `x` (squared norms `x_norms`, one per row of the range)
    /// against the vectors `part` of S (one of `chunks()`, or all of S for the column index),
    /// row-major into `out` (rows.len() x part.len()).
    pub fn fill_part<R: Rows>(
        &self,
        x: &R,
        rows: Range<usize>,
        x_norms: &[f64],
        part: Range<usize>,
        out: &mut [f64],
        scratch: &mut BlockScratch,
    ) {
        let block = BlockRows { x, rows, x_norms };
        self.fill_part_as(block, part, out, scratch, Finish::Kernel)
    }

    /// `fill_part`, ending with the kernel values or with the dot products they come from.
    fn fill_part_as<R: Rows>(
        &self,
        block: BlockRows<'_, R>,
        part: Range<usize>,
        out: &mut [f64],
        scratch: &mut BlockScratch,
        finish: Finish,
    ) {
        let (nr, m) = (block.rows.len(), part.len());
        let x_norms = block.x_norms;
        assert!(
            out.len() >= nr * m && x_norms.len() >= nr && part.end <= self.n_basis,
            "fill_part: short slices"
        );
        if m == 0 {
            return;
        }
        let norms = &self.sq_norms[part.clone()];
        match &self.store {
            BasisStore::Columns(columns) => {
                let full = &mut scratch.values;
                full.resize(self.n_basis, 0.0);
                for (r, i) in block.rows.enumerate() {
                    columns.dots_with_row(block.x, i, full);
                    let o = &mut out[r * m..(r + 1) * m];
                    o.copy_from_slice(&full[part.clone()]);
                    if finish == Finish::Kernel {
                        self.kernel.from_dots(x_norms[r], norms, o);
                    }
                }
            }
            BasisStore::FeatureMajor(t) => {
                self.fill_from_copy(t, block, part, out, scratch, finish)
            }
        }
    }

    /// `fill_part` from the feature-major copy `t` of S.
    fn fill_from_copy<R: Rows>(
        &self,
        t: &[f64],
        block: BlockRows<'_, R>,
        part: Range<usize>,
        out: &mut [f64],
        scratch: &mut BlockScratch,
        finish: Finish,
    ) {
        let BlockRows { x, rows, x_norms } = block;
        let (n, dim, kernel) = (self.n_basis, self.dim, self.kernel);
        let m = part.len();
        let norms = &self.sq_norms[part.clone()];
        let svs = simd::FeatureMajor::new(&t[part.start..], n, m, norms);
        let level = simd::level();
        let BlockScratch {
            q,
            cols,
            row_cols,
            row_vals,
            ..
        } = scratch;
        let g8 = simd::BLOCK_ROWS;
        let mut r = 0;
        while r < rows.len() {
            let take = (rows.len() - r).min(g8);
            let first = rows.start + r;
            if take == g8 {
                q.resize(g8 * dim, 0.0);
                for p in 0..g8 {
                    x.write_dense(first + p, &mut q[p * dim..(p + 1) * dim]);
                }
                cols.clear();
                let mut nnz = 0;
                for c in 0..dim {
                    let used = (0..g8).filter(|&p| q[p * dim + c] != 0.0).count();
                    if used > 0 {
                        cols.push(c);
                        nnz += used;
                    }
                }
                if cols.len() * g8 <= BLOCKED_FMA_RATIO * nnz {
                    let o = &mut out[r * m..(r + g8) * m];
                    simd::dots_8_rows(q, dim, cols, &t[part.start..], n, m, o);
                    if finish == Finish::Kernel {
                        for p in 0..g8 {
                            kernel.from_dots(x_norms[r + p], norms, &mut o[p * m..(p + 1) * m]);
                        }
                    }
                    r += g8;
                    continue;
                }
            }
            for p in 0..take {
                row_cols.clear();
                row_vals.clear();
                x.for_each_nonzero(first + p, |c, v| {
                    if c < dim && v != 0.0 {
                        row_cols.push(c);
                        row_vals.push(v);
                    }
                });
                let row = simd::RowNonzeros {
                    cols: row_cols,
                    vals: row_vals,
                    sq_norm: x_norms[r + p],
                };
                let o = &mut out[(r + p) * m..(r + p + 1) * m];
                match (kernel, finish) {
                    (Kernel::Rbf { gamma }, Finish::Kernel) => {
                        simd::rbf_row(level, svs, row, gamma, None, o);
                    }
                    _ => {
                        o.fill(0.0);
                        for (&c, &v) in row_cols.iter().zip(row_vals.iter()) {
                            simd::axpy(v, &t[c * n + part.start..c * n + part.end], o);
                        }
                        if finish == Finish::Kernel {
                            kernel.from_dots(x_norms[r + p], norms, o);
                        }
                    }
                }
            }
            r += take;
        }
    }

    /// `fill_rows` in f32 (`Kernel::from_dots_f32`: for the Gaussian kernel an exponential in
    /// f32 arithmetic): each chunk's dot products in the scratch, the values written straight
    /// into `out` (no f64 block, no copy, no rounding pass).
    pub fn fill_rows_f32<R: Rows>(
        &self,
        x: &R,
        rows: Range<usize>,
        x_norms: &[f64],
        out: &mut [f32],
        scratch: &mut BlockScratch,
    ) {
        let (nr, n) = (rows.len(), self.n_basis);
        assert!(out.len() >= nr * n, "fill_rows_f32: short output");
        let mut dots = std::mem::take(&mut scratch.values);
        for part in self.chunks() {
            let m = part.len();
            // Grown, never shrunk: a shorter chunk would zero the regrown tail next time.
            if dots.len() < nr * m {
                dots.resize(nr * m, 0.0);
            }
            let d = &mut dots[..nr * m];
            let block = BlockRows {
                x,
                rows: rows.clone(),
                x_norms,
            };
            self.fill_part_as(block, part.clone(), d, scratch, Finish::Dots);
            let norms = &self.sq_norms[part.clone()];
            for r in 0..nr {
                self.kernel.from_dots_f32(
                    x_norms[r],
                    norms,
                    &mut d[r * m..(r + 1) * m],
                    &mut out[r * n + part.start..r * n + part.end],
                );
            }
        }
        scratch.values = dots;
    }

    /// Kernel values of rows `rows` of `x` against all of S, row-major into `out`
    /// (rows.len() x n_basis).
    pub fn fill_rows<R: Rows>(
        &self,
        x: &R,
        rows: Range<usize>,
        x_norms: &[f64],
        out: &mut [f64],
        scratch: &mut BlockScratch,
    ) {
        let (nr, n) = (rows.len(), self.n_basis);
        assert!(out.len() >= nr * n, "fill_rows: short output");
        if self.chunk >= n {
            return self.fill_part(x, rows, x_norms, 0..n, out, scratch);
        }
        let mut values = std::mem::take(&mut scratch.values);
        for part in self.chunks() {
            let m = part.len();
            values.resize(nr * m, 0.0);
            self.fill_part(x, rows.clone(), x_norms, part.clone(), &mut values, scratch);
            for r in 0..nr {
                out[r * n + part.start..r * n + part.end]
                    .copy_from_slice(&values[r * m..(r + 1) * m]);
            }
        }
        scratch.values = values;
    }
}

/// The feature-major copy or the column index: by the work per row, a row's non-zeros times
/// |S| multiply-adds from the copy (about 0.1 ns each, vectorised), against the lengths of the
/// row's columns in the index (about 2.5 ns per entry, a scatter), estimated from S's own
/// columns (a row hits column c about as often as S's vectors do).
fn prefer_copy<S: Rows>(basis: &S) -> bool {
    let (n, dim) = (basis.n_rows(), basis.n_cols());
    if n == 0 || dim == 0 || basis.dense_row(0).is_some() {
        return true;
    }
    if dim > 1 << 16 {
        return false;
    }
    let mut len = vec![0u64; dim];
    for j in 0..n {
        basis.for_each_nonzero(j, |c, _| {
            if let Some(l) = len.get_mut(c) {
                *l += 1;
            }
        });
    }
    let nnz = len.iter().sum::<u64>() as f64;
    if nnz == 0.0 {
        return true;
    }
    // Mean length of the column behind a random non-zero.
    let hit_len = len.iter().map(|&l| (l as f64).powi(2)).sum::<f64>() / nnz;
    0.1 * n as f64 <= 2.5 * hit_len
}

/// The outputs of a kernel expansion over S.
#[derive(Debug, Clone, Copy)]
pub enum Outputs<'a> {
    /// `coef[j * n_out + k]`: vector j's coefficient in output k.
    PerVector { coef: &'a [f64], n_out: usize },
    /// One-vs-one in LIBSVM's layout: S grouped by class (class c holds the vectors
    /// `starts[c]..starts[c + 1]`), `coef` (n_classes - 1) x |S| row-major; the output of pair
    /// (a, b), a < b, in the order (0, 1), (0, 2), ..., is the sum over class a's vectors of
    /// `coef[b - 1][j] k_j` and over class b's of `coef[a][j] k_j`. A kernel value costs
    /// n_classes - 1 multiply-adds, not one per pair.
    OneVsOne {
        starts: &'a [usize],
        coef: &'a [f64],
    },
    /// One output per group of vectors that no other output uses (BudgetSVC's one-vs-one
    /// pairs, each with its own support vectors): output o is the sum over the vectors
    /// `starts[o]..starts[o + 1]` of `coef[j] k_j`. A kernel value costs one multiply-add.
    Grouped {
        starts: &'a [usize],
        coef: &'a [f64],
    },
}

impl Outputs<'_> {
    /// Values per row.
    pub fn n_out(&self) -> usize {
        match *self {
            Outputs::PerVector { n_out, .. } => n_out,
            Outputs::OneVsOne { starts, .. } => {
                let k = starts.len().saturating_sub(1);
                k * k.saturating_sub(1) / 2
            }
            Outputs::Grouped { starts, .. } => starts.len().saturating_sub(1),
        }
    }

    /// Checks the arrays against |S|.
    pub fn check(&self, n_basis: usize) -> Result<()> {
        let ok = match *self {
            Outputs::PerVector { coef, n_out } => {
                n_out > 0 && Some(coef.len()) == n_basis.checked_mul(n_out)
            }
            Outputs::OneVsOne { starts, coef } => {
                starts.len() >= 3
                    && starts[0] == 0
                    && starts.last() == Some(&n_basis)
                    && starts.windows(2).all(|w| w[0] <= w[1])
                    && Some(coef.len()) == (starts.len() - 2).checked_mul(n_basis)
            }
            Outputs::Grouped { starts, coef } => {
                starts.len() >= 2
                    && starts[0] == 0
                    && starts.last() == Some(&n_basis)
                    && starts.windows(2).all(|w| w[0] <= w[1])
                    && coef.len() == n_basis
            }
        };
        if ok {
            Ok(())
        } else {
            Err(SvmError::invalid_input(
                "coefficients do not fit the support vectors",
            ))
        }
    }

    /// out += the contributions of the vectors `part` of S with kernel values `k` (one per
    /// vector of the part).
    fn accumulate(&self, part: Range<usize>, k: &[f64], out: &mut [f64], tmp: &mut Vec<f64>) {
        match *self {
            Outputs::PerVector { coef, n_out } => {
                tmp.resize(n_out, 0.0);
                let c = &coef[part.start * n_out..part.end * n_out];
                simd::weighted_row_sum(simd::level(), c, n_out, k, tmp);
                for (o, v) in out.iter_mut().zip(tmp.iter()) {
                    *o += v;
                }
            }
            Outputs::OneVsOne { starts, coef } => {
                let n = *starts.last().unwrap_or(&0);
                let classes = starts.len() - 1;
                for c in 0..classes {
                    let (a, b) = (starts[c].max(part.start), starts[c + 1].min(part.end));
                    if a >= b {
                        continue;
                    }
                    let kv = &k[a - part.start..b - part.start];
                    for o in 0..classes {
                        if o == c {
                            continue;
                        }
                        let row = if o > c { o - 1 } else { o };
                        let s = simd::dot(&coef[row * n + a..row * n + b], kv);
                        out[pair_index(c.min(o), c.max(o), classes)] += s;
                    }
                }
            }
            Outputs::Grouped { starts, coef } => {
                for (o, group) in out.iter_mut().zip(starts.windows(2)) {
                    let (a, b) = (group[0].max(part.start), group[1].min(part.end));
                    if a < b {
                        *o += simd::dot(&coef[a..b], &k[a - part.start..b - part.start]);
                    }
                }
            }
        }
    }
}

/// The position of class pair (a, b), a < b, among k classes in the order (0, 1), (0, 2), ...
pub fn pair_index(a: usize, b: usize, k: usize) -> usize {
    a * k - a * (a + 1) / 2 + (b - a - 1)
}

/// Decision values of the expansion sum_j coef_j k(x, s_j) (+ intercept) for every row of `x`,
/// n_rows x n_out row-major into `out`; rows in parallel on the configured pool, the sum over S
/// taken chunk by chunk in a fixed order (the same values on any number of threads). Asks
/// `stop` between groups of blocks: `Err(Interrupted)` once it says so.
pub fn decision_values<R: Rows>(
    blocks: &KernelBlocks,
    outputs: &Outputs<'_>,
    intercept: Option<&[f64]>,
    x: &R,
    x_norms: &[f64],
    out: &mut [f64],
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<()> {
    outputs.check(blocks.n_basis)?;
    let n_out = outputs.n_out();
    let n = x.n_rows();
    if out.len() != n * n_out || x_norms.len() != n {
        return Err(SvmError::invalid_input(
            "decision output buffer has the wrong size",
        ));
    }
    if intercept.is_some_and(|b| b.len() != n_out) {
        return Err(SvmError::invalid_input(
            "one intercept per output is needed",
        ));
    }
    match intercept {
        Some(b) => out.chunks_mut(n_out).for_each(|o| o.copy_from_slice(b)),
        None => out.fill(0.0),
    }
    if blocks.n_basis == 0 || n == 0 {
        return Ok(());
    }
    let chunk = blocks.chunk_for(x);
    // Blocks between checks of `stop`: about 2^24 kernel values.
    let per_check = ((1usize << 24) / blocks.n_basis.max(1)).clamp(BLOCK_ROWS * 4, 1 << 16);
    let per_check = per_check.next_multiple_of(BLOCK_ROWS);
    parallel::install(|| -> Result<()> {
        for (g, group) in out.chunks_mut(per_check * n_out).enumerate() {
            if stop() {
                return Err(SvmError::Interrupted);
            }
            let base = g * per_check;
            group
                .par_chunks_mut(BLOCK_ROWS * n_out)
                .enumerate()
                .for_each_init(
                    || (BlockScratch::default(), Vec::new(), Vec::new()),
                    |(scratch, values, tmp), (b, o)| {
                        let first = base + b * BLOCK_ROWS;
                        let nr = o.len() / n_out;
                        let rows = first..first + nr;
                        for part in blocks.chunks_of(chunk) {
                            let m = part.len();
                            values.resize(nr * m, 0.0);
                            blocks.fill_part(
                                x,
                                rows.clone(),
                                &x_norms[rows.clone()],
                                part.clone(),
                                values,
                                scratch,
                            );
                            for r in 0..nr {
                                outputs.accumulate(
                                    part.clone(),
                                    &values[r * m..(r + 1) * m],
                                    &mut o[r * n_out..(r + 1) * n_out],
                                    tmp,
                                );
                            }
                        }
                    },
                );
        }
        Ok(())
    })
}

/// Decision values of the expansion from given kernel values (a precomputed kernel): `k` holds
/// n_rows x |S| values row-major (row r: k(x_r, s_j) for every j), `out` n_rows x n_out; the same
/// accumulation as `decision_values`, rows in parallel.
pub fn decision_from_kernel_values(
    outputs: &Outputs<'_>,
    intercept: Option<&[f64]>,
    n_basis: usize,
    k: &[f64],
    out: &mut [f64],
) -> Result<()> {
    outputs.check(n_basis)?;
    let n_out = outputs.n_out();
    let n = out.len() / n_out.max(1);
    if out.len() != n * n_out || Some(k.len()) != n.checked_mul(n_basis) {
        return Err(SvmError::invalid_input(format!(
            "kernel values must be n_samples x {n_basis} (one per support vector)"
        )));
    }
    if intercept.is_some_and(|b| b.len() != n_out) {
        return Err(SvmError::invalid_input(
            "one intercept per output is needed",
        ));
    }
    parallel::install(|| {
        out.par_chunks_mut(n_out)
            .zip(k.par_chunks(n_basis.max(1)))
            .for_each_init(Vec::new, |tmp, (o, kv)| {
                match intercept {
                    Some(b) => o.copy_from_slice(b),
                    None => o.fill(0.0),
                }
                if n_basis > 0 {
                    outputs.accumulate(0..n_basis, kv, o, tmp);
                }
            })
    });
    Ok(())
}

/// Kernel matrix K[i, j] = k(x_i, y_j), row-major into `out` (len x.n_rows() * y.n_rows()),
/// blocks of rows of X computed in parallel on the configured pool as kernel blocks against Y
/// (`kernel_block`: the routine prediction and the polish use). Rows whose squared norms
/// overflow (values near 1e154) make the norm form NaN; those entries are taken from the
/// explicit difference instead, which is exact there (and underflows to a kernel value of 0).
pub fn kernel_matrix<X: Rows, Y: Rows>(x: &X, y: &Y, gamma: f64, out: &mut [f64]) -> Result<()> {
    check_gamma(gamma)?;
    let (n, m) = (x.n_rows(), y.n_rows());
    if out.len() != n * m {
        return Err(SvmError::invalid_input(
            "kernel output buffer has the wrong size",
        ));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let blocks = KernelBlocks::new(y, gamma)?;
    let x_norms = x.sq_norms();
    parallel::install(|| {
        out.par_chunks_mut(BLOCK_ROWS * m)
            .enumerate()
            .for_each_init(BlockScratch::default, |scratch, (b, block)| {
                let first = b * BLOCK_ROWS;
                let rows = first..first + block.len() / m;
                blocks.fill_rows(x, rows.clone(), &x_norms[rows.clone()], block, scratch);
                for (r, row) in block.chunks_mut(m).enumerate() {
                    for (j, o) in row.iter_mut().enumerate() {
                        if o.is_nan() {
                            *o = (-gamma * explicit_sq_distance(x, first + r, y, j)).exp();
                        }
                    }
                }
            });
    });
    Ok(())
}

/// |x_i - y_j|^2 from the two rows' non-zeros (no norms involved).
fn explicit_sq_distance<X: Rows, Y: Rows>(x: &X, i: usize, y: &Y, j: usize) -> f64 {
    let mut a: Vec<(usize, f64)> = Vec::new();
    x.for_each_nonzero(i, |c, v| a.push((c, v)));
    let mut b: Vec<(usize, f64)> = Vec::new();
    y.for_each_nonzero(j, |c, v| b.push((c, v)));
    a.sort_by_key(|e| e.0);
    b.sort_by_key(|e| e.0);
    let (mut p, mut q, mut d2) = (0, 0, 0.0);
    while p < a.len() || q < b.len() {
        let ca = a.get(p).map_or(usize::MAX, |e| e.0);
        let cb = b.get(q).map_or(usize::MAX, |e| e.0);
        let diff = match ca.cmp(&cb) {
            std::cmp::Ordering::Less => {
                p += 1;
                a[p - 1].1
            }
            std::cmp::Ordering::Greater => {
                q += 1;
                b[q - 1].1
            }
            std::cmp::Ordering::Equal => {
                p += 1;
                q += 1;
                a[p - 1].1 - b[q - 1].1
            }
        };
        d2 += diff * diff;
    }
    d2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::data::rows::tests::csr_parts;
    use crate::core::data::rows::{CsrView, DenseView};
    use crate::core::kernels::kernel::tests::explicit_kernel;

    fn explicit(a: &[f64], b: &[f64], gamma: f64) -> f64 {
        explicit_kernel(Kernel::rbf(gamma), a, b)
    }

    /// A dense matrix with a share `zeros` of zero entries, and its CSR parts.
    fn matrix(
        rng: &mut Rng,
        n: usize,
        d: usize,
        zeros: f64,
    ) -> (Vec<f64>, Vec<i64>, Vec<i64>, Vec<f64>) {
        let mut dense = vec![0.0; n * d];
        let (mut indptr, mut idx, mut val) = (vec![0i64], vec![], vec![]);
        for i in 0..n {
            for c in 0..d {
                if rng.next_f64() >= zeros {
                    let v = rng.next_f64() * 2.0 - 1.0;
                    dense[i * d + c] = v;
                    idx.push(c as i64);
                    val.push(v);
                }
            }
            indptr.push(idx.len() as i64);
        }
        (dense, indptr, idx, val)
    }

    /// Every storage of S and of X, every block shape and every SIMD level gives the explicit
    /// kernel values.
    #[test]
    fn blocks_match_explicit_kernel_values() {
        let mut rng = Rng::new(7);
        for (round, &(n, m, d, zeros)) in [
            (45, 37, 9, 0.0),
            (70, 300, 22, 0.4),
            (33, 20, 123, 0.9),
            (17, 1000, 5, 0.5),
            (9, 3, 400, 0.97),
        ]
        .iter()
        .enumerate()
        {
            let (xd, xp, xi, xv) = matrix(&mut rng, n, d, zeros);
            let (sd, sp, si, sv) = matrix(&mut rng, m, d, zeros);
            let xdense = DenseView::new(&xd, n, d).unwrap();
            let xcsr = CsrView::new(&xp, &xi, &xv, d).unwrap();
            let sdense = DenseView::new(&sd, m, d).unwrap();
            let scsr = CsrView::new(&sp, &si, &sv, d).unwrap();
            for kernel in [
                Kernel::rbf(0.3),
                Kernel::Linear,
                Kernel::Poly {
                    gamma: 0.5,
                    coef0: 1.0,
                    degree: 3,
                },
                Kernel::Sigmoid {
                    gamma: 0.2,
                    coef0: 0.1,
                },
            ] {
                let mut blocks = vec![
                    KernelBlocks::with_kernel(&sdense, kernel).unwrap(),
                    KernelBlocks::with_kernel(&scsr, kernel).unwrap(),
                ];
                // The column index too, whatever the cost estimate says.
                let mut by_columns = blocks[0].clone();
                by_columns.store = BasisStore::Columns(ColumnIndex::from_rows(&scsr));
                by_columns.chunk = m;
                blocks.push(by_columns);
                // Small chunks: many parts per block.
                let mut small = blocks[0].clone();
                small.chunk = 16;
                blocks.push(small);
                let norms = xdense.sq_norms();
                for b in &blocks {
                    for out in [
                        uneven_blocks(b, &xdense, &norms),
                        uneven_blocks(b, &xcsr, &norms),
                    ] {
                        for i in 0..n {
                            for j in 0..m {
                                let (xi, sj) = (&xd[i * d..(i + 1) * d], &sd[j * d..(j + 1) * d]);
                                let e = explicit_kernel(kernel, xi, sj);
                                let got = out[i * m + j];
                                assert!(
                                    (got - e).abs() < 1e-12 * (1.0 + e.abs()),
                                    "round {round} {kernel:?}: K[{i},{j}] {got} vs {e}"
                                );
                            }
                        }
                    }
                    // In f32: the f64 values rounded, to an f32 ulp, on every path.
                    for (label, wide, narrow) in [
                        (
                            "dense",
                            uneven_blocks(b, &xdense, &norms),
                            f32_blocks(b, &xdense, &norms),
                        ),
                        (
                            "csr",
                            uneven_blocks(b, &xcsr, &norms),
                            f32_blocks(b, &xcsr, &norms),
                        ),
                    ] {
                        for (k, (&w, &v)) in wide.iter().zip(&narrow).enumerate() {
                            let ulps = ((w as f32).to_bits() as i64 - v.to_bits() as i64).abs();
                            let close = (f64::from(v) - w).abs() <= 1e-6 * (1.0 + w.abs());
                            assert!(
                                ulps <= 1 || close,
                                "round {round} {kernel:?} {label}: value {k} {v} vs {w}"
                            );
                        }
                    }
                }
            }
        }
        let s = DenseView::new(&[1.0, 2.0], 1, 2).unwrap();
        assert!(KernelBlocks::with_kernel(&s, Kernel::Precomputed).is_err());
    }

    /// K(X, S) filled in blocks of rows of uneven sizes.
    /// `fill_rows_f32` over all rows in blocks of 19 (groups of 8 and single rows both).
    fn f32_blocks<R: Rows>(b: &KernelBlocks, x: &R, norms: &[f64]) -> Vec<f32> {
        let (n, m) = (x.n_rows(), b.n_basis());
        let mut out = vec![0.0f32; n * m];
        let mut scratch = BlockScratch::default();
        let mut r = 0;
        while r < n {
            let e = (r + 19).min(n);
            b.fill_rows_f32(x, r..e, &norms[r..e], &mut out[r * m..e * m], &mut scratch);
            r = e;
        }
        out
    }

    fn uneven_blocks<R: Rows>(b: &KernelBlocks, x: &R, norms: &[f64]) -> Vec<f64> {
        let (n, m) = (x.n_rows(), b.n_basis());
        let mut out = vec![0.0; n * m];
        let mut scratch = BlockScratch::default();
        let mut r = 0;
        let mut size = 1;
        while r < n {
            let e = (r + size).min(n);
            b.fill_rows(x, r..e, &norms[r..e], &mut out[r * m..e * m], &mut scratch);
            r = e;
            size = size * 2 + 3;
        }
        out
    }

    /// Decision values equal the explicit sums, per vector and one-vs-one, with an intercept,
    /// the same on 1 and 3 threads.
    #[test]
    fn decision_values_match_explicit_sums() {
        let mut rng = Rng::new(3);
        let (n, m, d) = (150, 90, 6);
        let (xd, ..) = matrix(&mut rng, n, d, 0.2);
        let (sd, ..) = matrix(&mut rng, m, d, 0.2);
        let x = DenseView::new(&xd, n, d).unwrap();
        let s = DenseView::new(&sd, m, d).unwrap();
        let mut blocks = KernelBlocks::new(&s, 0.5).unwrap();
        blocks.chunk = 32;
        let k =
            |i: usize, j: usize| explicit(&xd[i * d..(i + 1) * d], &sd[j * d..(j + 1) * d], 0.5);
        let norms = x.sq_norms();
        // Per vector, 3 outputs.
        let coef: Vec<f64> = (0..m * 3).map(|_| rng.next_f64() - 0.5).collect();
        let intercept = [0.25, -1.0, 2.0];
        let outputs = Outputs::PerVector {
            coef: &coef,
            n_out: 3,
        };
        let mut runs = Vec::new();
        for threads in [1, 3] {
            let mut out = vec![0.0; n * 3];
            parallel::install_with(Some(threads), || {
                decision_values(
                    &blocks,
                    &outputs,
                    Some(&intercept),
                    &x,
                    &norms,
                    &mut out,
                    &|| false,
                )
            })
            .unwrap()
            .unwrap();
            runs.push(out);
        }
        assert_eq!(runs[0], runs[1]);
        for i in 0..n {
            for o in 0..3 {
                let e: f64 = (0..m).map(|j| coef[j * 3 + o] * k(i, j)).sum::<f64>() + intercept[o];
                assert!((runs[0][i * 3 + o] - e).abs() < 1e-10);
            }
        }
        // One-vs-one, 4 classes of 10, 30, 0 and 50 vectors.
        let starts = [0, 10, 40, 40, 90];
        let ovo: Vec<f64> = (0..3 * m).map(|_| rng.next_f64() - 0.5).collect();
        let outputs = Outputs::OneVsOne {
            starts: &starts,
            coef: &ovo,
        };
        assert_eq!(outputs.n_out(), 6);
        let mut out = vec![0.0; n * 6];
        decision_values(&blocks, &outputs, None, &x, &norms, &mut out, &|| false).unwrap();
        let class_of = |j: usize| {
            starts
                .windows(2)
                .position(|w| w[0] <= j && j < w[1])
                .unwrap()
        };
        let mut p = 0;
        for a in 0..4 {
            for b in a + 1..4 {
                for i in 0..n {
                    let e: f64 = (0..m)
                        .map(|j| match class_of(j) {
                            c if c == a => ovo[(b - 1) * m + j] * k(i, j),
                            c if c == b => ovo[a * m + j] * k(i, j),
                            _ => 0.0,
                        })
                        .sum();
                    assert!(
                        (out[i * 6 + p] - e).abs() < 1e-10,
                        "pair ({a}, {b}) row {i}"
                    );
                }
                assert_eq!(pair_index(a, b, 4), p);
                p += 1;
            }
        }
        // Grouped: 3 outputs over the vectors 0..25, 25..25 (none) and 25..90.
        let starts = [0, 25, 25, 90];
        let grouped = Outputs::Grouped {
            starts: &starts,
            coef: &ovo[..m],
        };
        assert_eq!(grouped.n_out(), 3);
        let mut out = vec![0.0; n * 3];
        decision_values(
            &blocks,
            &grouped,
            Some(&intercept),
            &x,
            &norms,
            &mut out,
            &|| false,
        )
        .unwrap();
        for i in 0..n {
            for o in 0..3 {
                let e: f64 = (starts[o]..starts[o + 1])
                    .map(|j| ovo[j] * k(i, j))
                    .sum::<f64>()
                    + intercept[o];
                assert!((out[i * 3 + o] - e).abs() < 1e-10, "group {o} row {i}");
            }
        }
        let bad = Outputs::Grouped {
            starts: &[0, 25, 80],
            coef: &ovo[..m],
        };
        assert!(decision_values(&blocks, &bad, None, &x, &norms, &mut out, &|| false).is_err());
        // Bad shapes are errors, a stop request interrupts.
        let bad = Outputs::OneVsOne {
            starts: &[0, 10, 80],
            coef: &ovo,
        };
        assert!(decision_values(&blocks, &bad, None, &x, &norms, &mut out, &|| false).is_err());
        let outputs = Outputs::PerVector {
            coef: &coef,
            n_out: 3,
        };
        let mut out = vec![0.0; n * 3];
        assert!(matches!(
            decision_values(&blocks, &outputs, None, &x, &norms, &mut out, &|| true),
            Err(SvmError::Interrupted)
        ));
    }

    #[test]
    fn kernel_matrix_matches_explicit_distance_dense_and_sparse() {
        let mut rng = Rng::new(5);
        let (n, m, d) = (7, 5, 9);
        let mut xs: Vec<f64> = (0..n * d).map(|_| rng.next_f64() - 0.5).collect();
        // Make X sparse-ish so the CSR path has real zeros.
        for v in xs.iter_mut() {
            if rng.next_f64() < 0.5 {
                *v = 0.0;
            }
        }
        let ys: Vec<f64> = (0..m * d).map(|_| rng.next_f64() - 0.5).collect();
        let x = DenseView::new(&xs, n, d).unwrap();
        let y = DenseView::new(&ys, m, d).unwrap();
        let (indptr, idx, val) = csr_parts(&xs, d);
        let xsp = CsrView::new(&indptr, &idx, &val, d).unwrap();
        let mut k1 = vec![0.0; n * m];
        let mut k2 = vec![0.0; n * m];
        let mut k3 = vec![0.0; n * n];
        kernel_matrix(&x, &y, 0.7, &mut k1).unwrap();
        kernel_matrix(&xsp, &y, 0.7, &mut k2).unwrap();
        kernel_matrix(&xsp, &xsp, 0.7, &mut k3).unwrap();
        // The same rows declared 10^12 columns wide take the hash-probe path: same values.
        let wide = CsrView::new(&indptr, &idx, &val, 1_000_000_000_000).unwrap();
        let mut k4 = vec![0.0; n * n];
        kernel_matrix(&wide, &wide, 0.7, &mut k4).unwrap();
        for (a, b) in k3.iter().zip(&k4) {
            assert!((a - b).abs() < 1e-13);
        }
        for i in 0..n {
            for j in 0..m {
                let e = explicit(&xs[i * d..(i + 1) * d], &ys[j * d..(j + 1) * d], 0.7);
                assert!((k1[i * m + j] - e).abs() < 1e-13);
                assert!((k2[i * m + j] - e).abs() < 1e-13);
            }
            for j in 0..n {
                let e = explicit(&xs[i * d..(i + 1) * d], &xs[j * d..(j + 1) * d], 0.7);
                assert!((k3[i * n + j] - e).abs() < 1e-13);
            }
        }
        assert!(kernel_matrix(&x, &y, -1.0, &mut k1).is_err());
        assert!(kernel_matrix(&x, &y, f64::NAN, &mut k1).is_err());
    }
}
