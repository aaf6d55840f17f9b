//! The polish's Hessian-free direction (`polish/`; FALKON: Rudi, Carratino & Rosasco
//! 2017): the Newton system H x = -g solved by preconditioned conjugate gradients,
//! H applied as products with the squared rows' kernel values (never formed), and the dense
//! Cholesky factorisations both the Newton system and the preconditioner need.
//!
//! The preconditioner approximates the loss term's curvature 2C K_Q^T W K_Q by a K_SS^2 with
//! a = 2C sum_Q w / m (what it is when S is a sample of the rows Q), so
//!
//!   P = K_SS + a K_SS^2 = L (I + a L^T L) L^T = L B B^T L^T,
//!
//! L the Cholesky factor of K_SS (with a ridge) and B that of I + a L^T L: P = T T^T with
//! T = L B lower triangular, so applying P^-1 is two triangular solves (m^2 / 2 each), building
//! it two factorisations and two products (at most m^3 / 6 multiply-adds each). The
//! intercept's curvature is its own diagonal entry.

use rayon::prelude::*;

use crate::core::common::error::Result;
use crate::core::common::parallel;
use crate::core::simd;

/// Called between the blocks of the O(m^3) factorisations and products, which take tens of
/// seconds at m = 10,000 (there hundreds of calls, a fraction of a second apart): its error
/// (Ctrl-C) stops the work there and is returned.
pub(crate) type Check<'a> = &'a mut dyn FnMut() -> Result<()>;

/// Columns of a panel of the blocked factorisation: the panel's rows (8 at a time) against
/// its transpose are one register-blocked product, `simd::dots_8_rows`, whose result stays in
/// L1 for the update.
const PANEL: usize = 96;

/// Length of the sums per packed block of `lower_product`: a tile's rows (6 x 256) and a
/// panel (256 x 8 or 16) stay in L1 while the tile runs.
const PRODUCT_DEPTH: usize = 256;

/// Where `lower_product` adds its triangle: c[i, j] is `values[i * stride + offset + j]`.
struct LowerTarget<'a, T> {
    values: &'a mut [T],
    stride: usize,
    offset: usize,
}

/// c[i, j] += sign * sum_k x(i, k) x(j, k) for j <= i < n, k < width (c: `out`): the lower
/// triangle of X X^T added to (or taken from) c.
/// `triangular`: x(i, k) = 0 for k < i (X = L^T), so a block of k needs only the rows before
/// its end.
///
/// Packed as the BLAS do: per block of `PRODUCT_DEPTH` k, X's rows in panels of
/// `T::tile_columns()` (k-major), then per tile of `PRODUCT_TILE_ROWS` rows (in parallel, each
/// tile's rows of c its own) its rows packed once and multiplied against every panel up to the
/// diagonal by `T::tile`. Each sum is taken in k order within a block and the blocks in
/// order, whatever the threads.
fn lower_product<T: FactorEntry>(
    x: &(dyn Fn(usize, usize) -> T + Sync),
    n: usize,
    width: usize,
    triangular: bool,
    sign: f64,
    out: LowerTarget<'_, T>,
    check: Check<'_>,
) -> Result<()> {
    let LowerTarget {
        values: c,
        stride: c_stride,
        offset: c_offset,
    } = out;
    let nr = T::tile_columns();
    let mr = simd::PRODUCT_TILE_ROWS;
    let mut panels: Vec<T> = Vec::new();
    let mut k0 = 0;
    while k0 < width {
        check()?;
        let k1 = (k0 + PRODUCT_DEPTH).min(width);
        let kc = k1 - k0;
        let rows = if triangular { n.min(k1) } else { n };
        let n_panels = rows.div_ceil(nr);
        panels.clear();
        panels.resize(n_panels * kc * nr, T::default());
        parallel::install(|| {
            panels
                .par_chunks_mut(kc * nr)
                .enumerate()
                .for_each(|(jt, panel)| {
                    for jj in 0..nr.min(rows - jt * nr) {
                        for k in 0..kc {
                            panel[k * nr + jj] = x(jt * nr + jj, k0 + k);
                        }
                    }
                })
        });
        let panels = &panels;
        parallel::install(|| {
            c[..rows * c_stride]
                .par_chunks_mut(mr * c_stride)
                .enumerate()
                .for_each_init(
                    || (vec![T::default(); mr * kc], vec![T::default(); mr * nr]),
                    |(a, out), (t, c_rows)| {
                        let i0 = t * mr;
                        let tile_rows = c_rows.len().div_ceil(c_stride).min(rows - i0);
                        for r in 0..tile_rows {
                            for k in 0..kc {
                                a[r * kc + k] = x(i0 + r, k0 + k);
                            }
                        }
                        let last = i0 + tile_rows - 1;
                        for jt in 0..=last / nr {
                            let panel = &panels[jt * kc * nr..(jt + 1) * kc * nr];
                            T::tile(a, kc, tile_rows, panel, kc, out);
                            for r in 0..tile_rows {
                                let i = i0 + r;
                                let j_end = (jt * nr + nr).min(i + 1);
                                for j in jt * nr..j_end {
                                    let at = &mut c_rows[r * c_stride + c_offset + j];
                                    *at = T::from_value(
                                        at.value() + sign * out[r * nr + j - jt * nr].value(),
                                    );
                                }
                            }
                        }
                    },
                )
        });
        k0 = k1;
    }
    Ok(())
}

/// Rows per block of `lower_times_lower_in_place`: a block's products are written back once
/// the block is done, so the rows above it are still B's when the blocks above read them.
const TIMES_BLOCK: usize = 32 * simd::PRODUCT_TILE_ROWS;

/// b := l b for two lower triangular p x p matrices (row-major, upper parts zero), in place:
/// (L B)_ij = sum_{j <= k <= i} L_ik B_kj. Row blocks from the last, each computed into a
/// block-sized buffer from the rows of B at or above its end (not yet written) and then stored:
/// no second p x p matrix (p = 10,000: 400 MB in f32). Within a block as `lower_product`: per
/// block of `PRODUCT_DEPTH` k, B's rows packed in panels, the block's rows in tiles (in
/// parallel) against every panel up to the diagonal; the same sums on any thread count.
fn lower_times_lower_in_place<T: FactorEntry>(
    l: &[T],
    b: &mut [T],
    p: usize,
    check: Check<'_>,
) -> Result<()> {
    let nr = T::tile_columns();
    let mr = simd::PRODUCT_TILE_ROWS;
    let mut panels: Vec<T> = Vec::new();
    let mut block: Vec<T> = Vec::new();
    let mut i1 = p;
    while i1 > 0 {
        let i0 = i1.saturating_sub(TIMES_BLOCK);
        block.clear();
        block.resize((i1 - i0) * i1, T::default());
        let mut k0 = 0;
        while k0 < i1 {
            check()?;
            let k1 = (k0 + PRODUCT_DEPTH).min(i1);
            let kc = k1 - k0;
            // B_kj = 0 for j > k: the panels up to column k1.
            let n_panels = k1.div_ceil(nr);
            panels.clear();
            panels.resize(n_panels * kc * nr, T::default());
            let source = &*b;
            parallel::install(|| {
                panels
                    .par_chunks_mut(kc * nr)
                    .enumerate()
                    .for_each(|(jt, panel)| {
                        for k in 0..kc {
                            let row = &source[(k0 + k) * p..(k0 + k + 1) * p];
                            for jj in 0..nr.min(k1 - jt * nr) {
                                panel[k * nr + jj] = row[jt * nr + jj];
                            }
                        }
                    })
            });
            let panels = &panels;
            parallel::install(|| {
                block.par_chunks_mut(mr * i1).enumerate().for_each_init(
                    || (vec![T::default(); mr * kc], vec![T::default(); mr * nr]),
                    |(a, out), (t, rows)| {
                        let first = i0 + t * mr;
                        let tile_rows = rows.len() / i1;
                        for r in 0..tile_rows {
                            let at = (first + r) * p + k0;
                            a[r * kc..(r + 1) * kc].copy_from_slice(&l[at..at + kc]);
                        }
                        let last = first + tile_rows - 1;
                        for jt in 0..n_panels.min(last / nr + 1) {
                            let panel = &panels[jt * kc * nr..(jt + 1) * kc * nr];
                            T::tile(a, kc, tile_rows, panel, kc, out);
                            for r in 0..tile_rows {
                                let j_end = (jt * nr + nr).min(first + r + 1).min(k1);
                                for j in jt * nr..j_end {
                                    let at = &mut rows[r * i1 + j];
                                    *at = T::from_value(
                                        at.value() + out[r * nr + j - jt * nr].value(),
                                    );
                                }
                            }
                        }
                    },
                )
            });
            k0 = k1;
        }
        for (r, row) in block.chunks_exact(i1).enumerate() {
            b[(i0 + r) * p..(i0 + r) * p + i1].copy_from_slice(row);
        }
        i1 = i0;
    }
    Ok(())
}

/// Cholesky factor L (row-major lower, the upper part zeroed) of the lower triangle `a`
/// (row-major p x p) plus `ridge` I; false when a pivot is not positive.
pub(crate) fn cholesky(
    a: &[f64],
    ridge: f64,
    p: usize,
    l: &mut [f64],
    check: Check<'_>,
) -> Result<bool> {
    cholesky_in_place(l, ridge, p, &|i, row| lower_row_of(a, p, i, row), check)
}

/// Row i's lower part (i + 1 values) of the row-major p x p matrix `a`.
fn lower_row_of(a: &[f64], p: usize, i: usize, row: &mut [f64]) {
    row.copy_from_slice(&a[i * p..=i * p + i]);
}

/// Rows per part of the factorisation's first pass over `l` (`cholesky_in_place`).
const FILL_ROWS: usize = 1024;

/// `cholesky` in `l` of the lower triangle whose row i (i + 1 values) `fill_row(i, row)`
/// writes, in f64 or f32 (each entry's sums in the type's own products, the pivots in f64).
///
/// Right-looking and blocked (as LAPACK's dpotrf): per panel of `PANEL` columns, the diagonal
/// block, then the rows below solved against it, then the trailing lower triangle updated by
/// the panel's product with itself, the rows in parallel. Each value is computed in an order
/// that does not depend on the threads.
fn cholesky_in_place<T: FactorEntry>(
    l: &mut [T],
    ridge: f64,
    p: usize,
    fill_row: &(dyn Fn(usize, &mut [T]) + Sync),
    check: Check<'_>,
) -> Result<bool> {
    // The rows filled, the ridge added and the upper parts zeroed, by rows in parallel and in
    // parts with a check between them: at p = 10,000 the first touch of 800 MB (a second
    // serial, half a second on two threads).
    for (part, rows) in l[..p * p].chunks_mut(FILL_ROWS * p).enumerate() {
        check()?;
        parallel::install(|| {
            rows.par_chunks_mut(p).enumerate().for_each(|(r, row)| {
                let i = part * FILL_ROWS + r;
                fill_row(i, &mut row[..=i]);
                row[i] = T::from_value(row[i].value() + ridge);
                row[i + 1..].fill(T::default());
            })
        });
    }
    let mut k0 = 0;
    while k0 < p {
        check()?;
        let k1 = (k0 + PANEL).min(p);
        let width = k1 - k0;
        for i in k0..k1 {
            for j in k0..=i {
                let s = l[i * p + j].value()
                    - T::dot_same(&l[i * p + k0..i * p + j], &l[j * p + k0..j * p + j]);
                if i == j {
                    if !(s > 0.0 && s.is_finite()) {
                        return Ok(false);
                    }
                    l[i * p + i] = T::from_value(s.sqrt());
                } else {
                    l[i * p + j] = T::from_value(s / l[j * p + j].value());
                }
            }
        }
        if k1 == p {
            break;
        }
        let (top, below) = l.split_at_mut(k1 * p);
        let rest = p - k1;
        let diagonal = &top[k0 * p..];
        parallel::install(|| {
            below.par_chunks_mut(p).for_each(|row| {
                for j in 0..width {
                    let (done, at) = row[k0..].split_at_mut(j);
                    let s =
                        at[0].value() - T::dot_same(done, &diagonal[j * p + k0..j * p + k0 + j]);
                    at[0] = T::from_value(s / diagonal[j * p + k0 + j].value());
                }
            })
        });
        // The panel's rows below (rest x width), read by the product that updates them.
        let panel: Vec<T> = below
            .chunks(p)
            .flat_map(|row| row[k0..k1].iter().copied())
            .collect();
        lower_product(
            &|i, k| panel[i * width + k],
            rest,
            width,
            false,
            -1.0,
            LowerTarget {
                values: below,
                stride: p,
                offset: k1,
            },
            check,
        )?;
        k0 = k1;
    }
    Ok(true)
}

/// Factors the lower triangle whose rows `fill_row` writes (again before each try) into `l`
/// with the smallest ridge that succeeds: `ridge`, then ten times more (from 1e-10 when 0), 40
/// tries. Returns the ridge, None when every try fails (non-finite values).
fn factor_in_place<T: FactorEntry>(
    l: &mut [T],
    p: usize,
    mut ridge: f64,
    fill_row: &(dyn Fn(usize, &mut [T]) + Sync),
    check: Check<'_>,
) -> Result<Option<f64>> {
    for _ in 0..40 {
        if cholesky_in_place(l, ridge, p, fill_row, check)? {
            return Ok(Some(ridge));
        }
        ridge = if ridge == 0.0 { 1e-10 } else { ridge * 10.0 };
    }
    Ok(None)
}

/// Unknowns per block of the triangular solves: the rows of a block less what the earlier
/// unknowns contribute are dots (or axpys) over the whole factor, in parallel; within a block
/// the solve runs one unknown after the other over a slice that stays in L1. The preconditioner
/// applies four solves per conjugate-gradient product, each reading half the m x m factor:
/// serial, they took as long as the Hessian product on a 40,000-row subsample at m = 3,000.
const SOLVE_BLOCK: usize = 128;
/// Columns per parallel part of the backward solve's update.
const SOLVE_COLUMNS: usize = 512;

/// Entries of a stored triangular factor: f64, or f32 for the preconditioner's, whose solves
/// are bound by reading the factor (the products near it read f32 rows too).
/// The factorisations run in either type as well: f32 where the factor only preconditions
/// (`Preconditioner::rescale`: twice the lanes per product and half the memory).
pub(crate) trait FactorEntry: Copy + Send + Sync + Default {
    fn dot(row: &[Self], z: &[f64]) -> f64;
    fn axpy(a: f64, row: &[Self], z: &mut [f64]);
    fn value(self) -> f64;
    fn from_value(v: f64) -> Self;
    /// Sum of a b over two stored rows (the factorisation's short dots).
    fn dot_same(a: &[Self], b: &[Self]) -> f64;
    /// `simd::product_tile` of the type and its width.
    fn tile_columns() -> usize;
    fn tile(a: &[Self], a_stride: usize, rows: usize, panel: &[Self], kc: usize, out: &mut [Self]);
}

impl FactorEntry for f64 {
    fn dot(row: &[f64], z: &[f64]) -> f64 {
        simd::dot(row, z)
    }
    fn axpy(a: f64, row: &[f64], z: &mut [f64]) {
        simd::axpy(a, row, z)
    }
    fn value(self) -> f64 {
        self
    }
    fn from_value(v: f64) -> Self {
        v
    }
    fn dot_same(a: &[f64], b: &[f64]) -> f64 {
        simd::dot(a, b)
    }
    fn tile_columns() -> usize {
        simd::product_tile_columns()
    }
    fn tile(a: &[f64], a_stride: usize, rows: usize, panel: &[f64], kc: usize, out: &mut [f64]) {
        simd::product_tile(a, a_stride, rows, panel, kc, out)
    }
}

impl FactorEntry for f32 {
    fn dot(row: &[f32], z: &[f64]) -> f64 {
        simd::dot_narrow(row, z)
    }
    fn axpy(a: f64, row: &[f32], z: &mut [f64]) {
        simd::axpy_narrow(a, row, z)
    }
    fn value(self) -> f64 {
        f64::from(self)
    }
    fn from_value(v: f64) -> Self {
        v as f32
    }
    fn dot_same(a: &[f32], b: &[f32]) -> f64 {
        // 16 running sums in f32 (vectorised on any level), added in f64.
        let mut acc = [0.0f32; 16];
        let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
        let (ra, rb) = (ca.remainder(), cb.remainder());
        for (x, y) in ca.zip(cb) {
            for k in 0..16 {
                acc[k] += x[k] * y[k];
            }
        }
        let tail: f64 = ra.iter().zip(rb).map(|(x, y)| f64::from(x * y)).sum();
        acc.iter().map(|&v| f64::from(v)).sum::<f64>() + tail
    }
    fn tile_columns() -> usize {
        simd::product_tile_f32_columns()
    }
    fn tile(a: &[f32], a_stride: usize, rows: usize, panel: &[f32], kc: usize, out: &mut [f32]) {
        simd::product_tile_f32(a, a_stride, rows, panel, kc, out)
    }
}

/// Parts of `symmetric_product`, fixed (not the thread count's) so its sums are the same on
/// any thread count.
const SYMMETRIC_PARTS: usize = 16;

/// out = A v for a symmetric m x m A of which only the lower triangle is read (row-major, f32,
/// the sums in f64): each row's part below the diagonal read once for both its row's dot and
/// its column's updates, half the bytes of the full product that bounds it (the Hessian
/// products' K_SS part: 36 -> 18 MB at m = 3,000). Rows in `SYMMETRIC_PARTS` parts of equal
/// area in parallel, the parts' column updates added in order.
pub(crate) fn symmetric_product(a: &[f32], m: usize, v: &[f64], out: &mut [f64]) {
    let bounds: Vec<usize> = (0..=SYMMETRIC_PARTS)
        .map(|p| (m as f64 * (p as f64 / SYMMETRIC_PARTS as f64).sqrt()).round() as usize)
        .collect();
    let parts: Vec<(Vec<f64>, Vec<f64>)> = parallel::install(|| {
        bounds
            .par_windows(2)
            .map(|w| {
                let (r0, r1) = (w[0], w[1]);
                let mut columns = vec![0.0; r1];
                let rows: Vec<f64> = (r0..r1)
                    .map(|i| {
                        let below = &a[i * m..i * m + i];
                        simd::axpy_narrow(v[i], below, &mut columns[..i]);
                        simd::dot_narrow(below, &v[..i]) + f64::from(a[i * m + i]) * v[i]
                    })
                    .collect();
                (rows, columns)
            })
            .collect()
    });
    for (w, (rows, _)) in bounds.windows(2).zip(&parts) {
        out[w[0]..w[1]].copy_from_slice(rows);
    }
    for (_, columns) in &parts {
        for (o, c) in out.iter_mut().zip(columns) {
            *o += c;
        }
    }
}

/// Solves L y = b in place (L row-major lower).
pub(crate) fn forward<T: FactorEntry>(l: &[T], p: usize, z: &mut [f64]) {
    let mut i0 = 0;
    while i0 < p {
        let i1 = (i0 + SOLVE_BLOCK).min(p);
        if i0 > 0 {
            let (known, block) = z.split_at_mut(i0);
            let known = &*known;
            parallel::install(|| {
                block[..i1 - i0]
                    .par_iter_mut()
                    .enumerate()
                    .for_each(|(t, zi)| {
                        let i = i0 + t;
                        *zi -= T::dot(&l[i * p..i * p + i0], known);
                    })
            });
        }
        for i in i0..i1 {
            let s = z[i] - T::dot(&l[i * p + i0..i * p + i], &z[i0..i]);
            z[i] = s / l[i * p + i].value();
        }
        i0 = i1;
    }
}

/// Solves L^T x = b in place (L row-major lower): column i of L^T is row i of L, so each
/// unknown, once known, leaves the others by one contiguous axpy; a block's unknowns leave the
/// unknowns before it in parallel column parts, each part taking the block's rows in order.
pub(crate) fn backward<T: FactorEntry>(l: &[T], p: usize, z: &mut [f64]) {
    let mut i1 = p;
    while i1 > 0 {
        let i0 = i1.saturating_sub(SOLVE_BLOCK);
        for i in (i0..i1).rev() {
            z[i] /= l[i * p + i].value();
            let zi = z[i];
            T::axpy(-zi, &l[i * p + i0..i * p + i], &mut z[i0..i]);
        }
        if i0 > 0 {
            let (before, block) = z.split_at_mut(i0);
            let known = &block[..i1 - i0];
            parallel::install(|| {
                before
                    .par_chunks_mut(SOLVE_COLUMNS)
                    .enumerate()
                    .for_each(|(part, zs)| {
                        let c0 = part * SOLVE_COLUMNS;
                        for (t, &x) in known.iter().enumerate() {
                            let i = i0 + t;
                            T::axpy(-x, &l[i * p + c0..i * p + c0 + zs.len()], zs);
                        }
                    })
            });
        }
        i1 = i0;
    }
}

/// Factors a lower triangle (f64) with the smallest ridge of `ridge * 10^k` (k < 40) that
/// succeeds.
fn factor(a: &[f64], p: usize, ridge: f64, check: Check<'_>) -> Result<Option<Vec<f64>>> {
    let mut l = vec![0.0; p * p];
    let fill_row = |i: usize, row: &mut [f64]| lower_row_of(a, p, i, row);
    Ok(factor_in_place(&mut l, p, ridge, &fill_row, check)?.map(|_| l))
}

/// P^-1 for the (m + 1)-variable Newton system (the m coefficients, then the intercept).
///
/// The factors are applied from f32 copies: half the bytes per solve, and P from factors
/// rounded to f32 is still symmetric positive definite, so the iteration still converges to
/// the solution of H x = b (P only sets how fast). L^T L is kept in f32 too (I + a L^T L has
/// eigenvalues of at least 1: its rounding to f32 moves the factor B by about f32's
/// precision), and B is factored in place and turned into T = L B in place: an application
/// reads T twice (two solves, bound by reading the factor: 36 MB at m = 3,000, where L and B
/// took 72), and the factors take 1.2 GB at m = 10,000 (f64 copies took 3.2 GB).
pub struct Preconditioner {
    m: usize,
    l: Vec<f32>,
    /// L^T L (lower triangle): what the scale multiplies, kept for rescaling.
    ltl: Vec<f32>,
    /// The scale a of the factor T below (NaN before `rescale`).
    scale: f64,
    /// T = L B, B the factor of I + a L^T L.
    t: Vec<f32>,
}

impl Preconditioner {
    /// From K_SS (m x m, full) and the ridge its factorisation starts from; `rescale` must
    /// follow. None when no factorisation succeeds (non-finite kernel values).
    pub fn new(kss: &[f64], m: usize, ridge: f64, check: Check<'_>) -> Result<Option<Self>> {
        // The f64 factor goes once rounded: L^T L is taken of the f32 factor the solves apply
        // (P stays exactly L (I + a L^T L) L^T of one L), and the peak holds one f64 matrix.
        let Some(l) = factor(kss, m, ridge, check)? else {
            return Ok(None);
        };
        let l: Vec<f32> = parallel::install(|| l.par_iter().map(|&v| v as f32).collect());
        // L^T L: (L^T L)_ij = sum_k L_ki L_kj, the lower triangle of X X^T for X = L^T, whose
        // row i is zero before k = i; in f32 as kept (I + a L^T L is well conditioned).
        let mut ltl = vec![0.0f32; m * m];
        let out = LowerTarget {
            values: &mut ltl,
            stride: m,
            offset: 0,
        };
        lower_product(&|i, k| l[k * m + i], m, m, true, 1.0, out, check)?;
        Ok(Some(Preconditioner {
            m,
            l,
            ltl,
            scale: f64::NAN,
            t: Vec::new(),
        }))
    }

    /// The scale a of the last `rescale` (NaN before).
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Factors I + a L^T L for the scale a and multiplies the factor by L (K_SS's factor and
    /// L^T L stay); false when it fails. In f32 and in place: its eigenvalues are at least 1,
    /// so f32's rounding moves no pivot near 0, and the factor is kept in f32 anyway (m =
    /// 3,000: half the time of f64; m = 10,000: no 800 MB f64 buffer beside the factors).
    /// An error from `check` leaves no factor (the scale NaN) until the next rescale.
    pub fn rescale(&mut self, a: f64, check: Check<'_>) -> Result<bool> {
        let m = self.m;
        let mut t = std::mem::take(&mut self.t);
        if t.len() != m * m {
            // Zeroed by the allocator, first touched by the factorisation's parallel fill.
            t = vec![0.0; m * m];
        }
        self.scale = f64::NAN;
        let ltl = &self.ltl;
        let fill_row = |i: usize, row: &mut [f32]| {
            for (v, &x) in row.iter_mut().zip(&ltl[i * m..=i * m + i]) {
                *v = (a * f64::from(x)) as f32;
            }
            row[i] += 1.0;
        };
        let done = factor_in_place(&mut t, m, 0.0, &fill_row, check)?.is_some();
        if done {
            lower_times_lower_in_place(&self.l, &mut t, m, check)?;
            self.scale = a;
        }
        self.t = t;
        Ok(done)
    }

    /// out = P^-1 r: T^-T T^-1 on the coefficients, a division by the intercept's curvature on
    /// the intercept.
    pub fn apply(&self, r: &[f64], out: &mut [f64], intercept: f64) {
        let m = self.m;
        out[..m].copy_from_slice(&r[..m]);
        let z = &mut out[..m];
        forward(&self.t, m, z);
        backward(&self.t, m, z);
        out[m] = r[m] / if intercept > 0.0 { intercept } else { 1.0 };
    }
}

/// `hv(v, out)`: out = H v, or the error (Ctrl-C) that stops the solve.
pub(crate) type HessianProduct<'a> = &'a mut dyn FnMut(&[f64], &mut [f64]) -> Result<()>;

/// `hv(v, running, out)`: out[k] = H_k v[k] for every k with running[k] (the others' out[k]
/// unread), or the error that stops the solves: one call for all the systems at a step, as a
/// distributed solve's round over the workers computes every output's product at once.
pub type HessianProducts<'a> =
    &'a mut dyn FnMut(&[Vec<f64>], &[bool], &mut [Vec<f64>]) -> Result<()>;

/// Solves H x = b by preconditioned conjugate gradients from x = 0 until the residual is
/// below `rel_tol` |b| or after `max_iter` products; `hv(v, out)` sets out = H v (H symmetric
/// positive definite; its error, Ctrl-C, ends the solve and is returned). Returns x and the
/// number of products.
pub(crate) fn solve(
    hv: HessianProduct<'_>,
    precond: &Preconditioner,
    intercept: f64,
    b: &[f64],
    rel_tol: f64,
    max_iter: usize,
) -> Result<(Vec<f64>, usize)> {
    let mut one = |v: &[Vec<f64>], _: &[bool], out: &mut [Vec<f64>]| hv(&v[0], &mut out[0]);
    let (mut x, products) = solve_many(
        &mut one,
        precond,
        &[intercept],
        std::slice::from_ref(&b.to_vec()),
        &[rel_tol],
        max_iter,
    )?;
    Ok((x.pop().expect("one system"), products))
}

/// `solve` for several systems H_k x_k = b_k with one preconditioner (each its intercept's
/// curvature `intercepts[k]` and tolerance `rel_tols[k]`) in lockstep: each step one call of
/// `hv` for the systems still running, each system's arithmetic `solve`'s. Returns the x_k
/// and the number of steps (products per running system).
pub fn solve_many(
    hv: HessianProducts<'_>,
    precond: &Preconditioner,
    intercepts: &[f64],
    b: &[Vec<f64>],
    rel_tols: &[f64],
    max_iter: usize,
) -> Result<(Vec<Vec<f64>>, usize)> {
    let q = b.len();
    assert!(
        intercepts.len() == q && rel_tols.len() == q,
        "solve_many: one per system"
    );
    let p = b.first().map_or(0, Vec::len);
    let mut x = vec![vec![0.0; p]; q];
    let mut r = b.to_vec();
    let mut z = vec![vec![0.0; p]; q];
    let mut hp = vec![vec![0.0; p]; q];
    let target: Vec<f64> = (0..q)
        .map(|k| rel_tols[k] * simd::dot(&b[k], &b[k]).sqrt())
        .collect();
    let mut running: Vec<bool> = target.iter().map(|&t| t != 0.0).collect();
    let mut rz = vec![0.0; q];
    for k in (0..q).filter(|&k| running[k]) {
        precond.apply(&r[k], &mut z[k], intercepts[k]);
        rz[k] = simd::dot(&r[k], &z[k]);
    }
    let mut dir = z.clone();
    let mut products = 0;
    while products < max_iter && running.contains(&true) {
        hv(&dir, &running, &mut hp)?;
        products += 1;
        for k in 0..q {
            if !running[k] {
                continue;
            }
            let curvature = simd::dot(&dir[k], &hp[k]);
            if !(curvature > 0.0 && curvature.is_finite()) {
                running[k] = false;
                continue;
            }
            let alpha = rz[k] / curvature;
            simd::axpy(alpha, &dir[k], &mut x[k]);
            simd::axpy(-alpha, &hp[k], &mut r[k]);
            if simd::dot(&r[k], &r[k]).sqrt() <= target[k] {
                running[k] = false;
                continue;
            }
            precond.apply(&r[k], &mut z[k], intercepts[k]);
            let rz_next = simd::dot(&r[k], &z[k]);
            let beta = rz_next / rz[k];
            rz[k] = rz_next;
            for (d, zi) in dir[k].iter_mut().zip(&z[k]) {
                *d = zi + beta * *d;
            }
        }
    }
    Ok((x, products))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;

    fn no_check() -> Result<()> {
        Ok(())
    }

    /// A Gaussian kernel matrix of random points in the plane and a system like the polish's.
    fn system(m: usize, n_rows: usize, seed: u64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let mut rng = Rng::new(seed);
        let pts: Vec<f64> = (0..(m + n_rows) * 2).map(|_| rng.next_f64()).collect();
        let k = |a: usize, b: usize| {
            let (dx, dy) = (pts[2 * a] - pts[2 * b], pts[2 * a + 1] - pts[2 * b + 1]);
            (-30.0 * (dx * dx + dy * dy)).exp()
        };
        let kss: Vec<f64> = (0..m * m).map(|i| k(i / m, i % m)).collect();
        let rows: Vec<f64> = (0..n_rows * m).map(|i| k(m + i / m, i % m)).collect();
        let p = m + 1;
        // H = [K + 2C R^T R, 2C R^T 1; 2C 1^T R, 2C n] with C = 0.5.
        let mut h = vec![0.0; p * p];
        for i in 0..m {
            for j in 0..m {
                let rr: f64 = (0..n_rows).map(|t| rows[t * m + i] * rows[t * m + j]).sum();
                // The polish's ridge on the coefficients (K_SS is near-singular).
                let ridge = if i == j { 1e-10 } else { 0.0 };
                h[i * p + j] = kss[i * m + j] + rr + ridge;
            }
            let s: f64 = (0..n_rows).map(|t| rows[t * m + i]).sum();
            h[i * p + m] = s;
            h[m * p + i] = s;
        }
        h[m * p + m] = n_rows as f64;
        (kss, rows, h)
    }

    /// The blocked factorisation against the textbook one (Cholesky-Crout, value by value) on
    /// sizes below, at and across the panel width: the same factor up to rounding, L L^T the
    /// matrix, the solves inverting it, the same bits on any thread count, and a matrix that
    /// is not positive definite refused.
    #[test]
    fn blocked_cholesky_matches_the_textbook_one() {
        let textbook = |a: &[f64], p: usize| -> Vec<f64> {
            let mut l = vec![0.0; p * p];
            for i in 0..p {
                for j in 0..=i {
                    let s: f64 =
                        a[i * p + j] - (0..j).map(|k| l[i * p + k] * l[j * p + k]).sum::<f64>();
                    l[i * p + j] = if i == j { s.sqrt() } else { s / l[j * p + j] };
                }
            }
            l
        };
        let mut rng = Rng::new(5);
        for p in [1, 2, 7, PANEL - 1, PANEL, PANEL + 1, 2 * PANEL + 13, 301] {
            // A = G G^T + p I, positive definite; the upper triangle holds junk the
            // factorisation must not read.
            let g: Vec<f64> = (0..p * p).map(|_| rng.next_f64() - 0.5).collect();
            let mut a = vec![0.0; p * p];
            for i in 0..p {
                for j in 0..p {
                    a[i * p + j] = if j <= i {
                        simd::dot(&g[i * p..(i + 1) * p], &g[j * p..(j + 1) * p])
                            + if i == j { p as f64 } else { 0.0 }
                    } else {
                        f64::NAN
                    };
                }
            }
            let mut l = vec![f64::NAN; p * p];
            assert!(
                cholesky(&a, 0.5, p, &mut l, &mut no_check).unwrap(),
                "p {p}"
            );
            let mut shifted = a.clone();
            for i in 0..p {
                shifted[i * p + i] += 0.5;
            }
            let reference = textbook(&shifted, p);
            for i in 0..p {
                for j in 0..p {
                    let (got, want) = (l[i * p + j], reference[i * p + j]);
                    assert!(
                        (got - want).abs() <= 1e-10 * (1.0 + want.abs()),
                        "p {p} ({i}, {j}): {got} vs {want}"
                    );
                }
            }
            // Solves: L L^T x = b.
            let b: Vec<f64> = (0..p).map(|_| rng.next_f64() - 0.5).collect();
            let mut x = b.clone();
            forward(&l, p, &mut x);
            backward(&l, p, &mut x);
            for i in 0..p {
                let ax: f64 = (0..p)
                    .map(|j| if j <= i { shifted[i * p + j] } else { shifted[j * p + i] } * x[j])
                    .sum();
                assert!((ax - b[i]).abs() < 1e-9, "p {p} row {i}");
            }
            let mut one = vec![0.0; p * p];
            crate::core::common::parallel::install_with(Some(1), || {
                cholesky(&a, 0.5, p, &mut one, &mut no_check)
            })
            .unwrap()
            .unwrap();
            assert!(
                one.iter().zip(&l).all(|(u, v)| u.to_bits() == v.to_bits()),
                "p {p}"
            );
            // The same in f32 (the rescale's): within f32's rounding of the f64 factor,
            // the same bits on one thread.
            let in_f32 = |threads: Option<usize>| {
                let mut l32 = vec![f32::NAN; p * p];
                let fill_row = |i: usize, row: &mut [f32]| {
                    for (v, &x) in row.iter_mut().zip(&a[i * p..=i * p + i]) {
                        *v = x as f32;
                    }
                };
                let ok = crate::core::common::parallel::install_with(threads, || {
                    cholesky_in_place(&mut l32, 0.5, p, &fill_row, &mut no_check)
                })
                .unwrap()
                .unwrap();
                assert!(ok, "p {p}");
                l32
            };
            let l32 = in_f32(None);
            let scale = reference.iter().fold(0.0f64, |s, v| s.max(v.abs()));
            for (k, (&got, &want)) in l32.iter().zip(&reference).enumerate() {
                assert!(
                    (f64::from(got) - want).abs() <= 1e-4 * scale,
                    "p {p} f32 entry {k}: {got} vs {want}"
                );
            }
            assert!(
                in_f32(Some(1))
                    .iter()
                    .zip(&l32)
                    .all(|(u, v)| u.to_bits() == v.to_bits()),
                "p {p} f32"
            );
            // Not positive definite: a negative pivot past the first panel.
            let mut bad = shifted.clone();
            let at = p - 1;
            bad[at * p + at] = -1.0;
            assert!(
                !cholesky(&bad, 0.0, p, &mut l, &mut no_check).unwrap(),
                "p {p}"
            );
        }
    }

    /// The packed product is X X^T's lower triangle added to c (the sums checked against
    /// plain ones; the upper triangle and the columns before the offset untouched), with
    /// blocks of k past `PRODUCT_DEPTH`, rows past whole tiles and panels, zero leading parts
    /// skipped when triangular, and the same bits on any thread count.
    #[test]
    fn lower_product_is_the_lower_triangle_of_x_x_transpose() {
        let mut rng = Rng::new(9);
        for (n, width, triangular) in [
            (1, 1, false),
            (5, 7, false),
            (13, 96, false),
            (37, 300, false),
            (1, 1, true),
            (13, 13, true),
            (300, 300, true),
            (263, 600, true),
        ] {
            let mut x: Vec<f64> = (0..n * width).map(|_| rng.next_f64() - 0.5).collect();
            if triangular {
                for i in 0..n {
                    x[i * width..i * width + i.min(width)].fill(0.0);
                }
            }
            let (offset, stride) = (3, n + 5);
            let c0: Vec<f64> = (0..n * stride).map(|_| rng.next_f64()).collect();
            let run = |threads| {
                let mut c = c0.clone();
                crate::core::common::parallel::install_with(Some(threads), || {
                    lower_product(
                        &|i, k| x[i * width + k],
                        n,
                        width,
                        triangular,
                        -1.0,
                        LowerTarget {
                            values: &mut c,
                            stride,
                            offset,
                        },
                        &mut no_check,
                    )
                })
                .unwrap()
                .unwrap();
                c
            };
            let c = run(2);
            for i in 0..n {
                for jc in 0..stride {
                    let at = i * stride + jc;
                    let want = match jc.checked_sub(offset) {
                        Some(j) if j <= i && j < n => {
                            let dot: f64 = (0..width)
                                .map(|k| x[i * width + k] * x[j * width + k])
                                .sum();
                            c0[at] - dot
                        }
                        _ => c0[at],
                    };
                    assert!(
                        (c[at] - want).abs() < 1e-12 * (1.0 + want.abs()) * width as f64,
                        "n {n} width {width} ({i}, {jc})"
                    );
                }
            }
            assert!(
                run(1)
                    .iter()
                    .zip(&c)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "n {n} width {width}"
            );
        }
    }

    /// L B of two lower triangles, in place, against the sums written out: sizes below, at and
    /// across the row blocks, the product depth and the tile widths, in f64 and f32, the same
    /// bits on any thread count.
    #[test]
    fn lower_times_lower_is_the_product() {
        fn check<T: FactorEntry>(p: usize, seed: u64, tol: f64) {
            let mut rng = Rng::new(seed);
            let mut lower = || -> Vec<T> {
                let mut x = vec![T::default(); p * p];
                for i in 0..p {
                    for j in 0..=i {
                        x[i * p + j] = T::from_value(rng.next_f64() - 0.5);
                    }
                }
                x
            };
            let (l, b) = (lower(), lower());
            let run = |threads| {
                let mut t = b.clone();
                crate::core::common::parallel::install_with(Some(threads), || {
                    lower_times_lower_in_place(&l, &mut t, p, &mut no_check)
                })
                .unwrap()
                .unwrap();
                t
            };
            let t = run(2);
            for i in 0..p {
                for j in 0..p {
                    let want: f64 = (j..=i)
                        .map(|k| l[i * p + k].value() * b[k * p + j].value())
                        .sum();
                    let got = t[i * p + j].value();
                    assert!(
                        (got - want).abs() <= tol * (1.0 + (i + 1 - j.min(i)) as f64),
                        "p {p} ({i}, {j}): {got} against {want}"
                    );
                }
            }
            assert!(
                run(1)
                    .iter()
                    .zip(&t)
                    .all(|(a, b)| a.value().to_bits() == b.value().to_bits()),
                "p {p}"
            );
        }
        for (p, seed) in [
            (1, 1),
            (5, 2),
            (33, 3),
            (191, 4),
            (192, 5),
            (193, 6),
            (450, 7),
        ] {
            check::<f64>(p, seed, 1e-13);
            check::<f32>(p, seed, 1e-5);
        }
    }

    /// The symmetric product from the lower triangle against the full one, on sizes below and
    /// across its parts, the same bits on any thread count.
    #[test]
    fn symmetric_product_reads_the_lower_triangle() {
        let mut rng = Rng::new(5);
        for m in [1, 2, 15, 16, 17, 300] {
            let mut a = vec![0.0f32; m * m];
            for i in 0..m {
                for j in 0..=i {
                    let x = (rng.next_f64() - 0.5) as f32;
                    a[i * m + j] = x;
                    // The upper part is never read: garbage there must not matter.
                    a[j * m + i] = if i == j { x } else { f32::NAN };
                }
            }
            let v: Vec<f64> = (0..m).map(|_| rng.next_f64() - 0.5).collect();
            let run = |threads| {
                let mut out = vec![0.0; m];
                crate::core::common::parallel::install_with(Some(threads), || {
                    symmetric_product(&a, m, &v, &mut out)
                })
                .unwrap();
                out
            };
            let out = run(2);
            for i in 0..m {
                let want: f64 = (0..m)
                    .map(|j| f64::from(a[i.max(j) * m + i.min(j)]) * v[j])
                    .sum();
                assert!((out[i] - want).abs() < 1e-12 * m as f64, "m {m} row {i}");
            }
            assert!(run(1)
                .iter()
                .zip(&out)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }

    /// The factorisations call their check between blocks, often enough for Ctrl-C (several
    /// calls per panel width of rows), and stop at the first error: it is returned, no
    /// further check is made, and a stopped rescale leaves no factor until the next one,
    /// which gives the uninterrupted factor bit for bit.
    #[test]
    fn a_failing_check_stops_the_factorisations() {
        use crate::core::common::error::SvmError;
        use std::cell::Cell;
        // Counts its calls; fails from call `stop_at` on.
        fn counting(calls: &Cell<usize>, stop_at: usize) -> impl FnMut() -> Result<()> + '_ {
            move || {
                calls.set(calls.get() + 1);
                if calls.get() >= stop_at {
                    Err(SvmError::Interrupted)
                } else {
                    Ok(())
                }
            }
        }
        let m = 3 * PANEL + 17;
        let (kss, _, _) = system(m, 0, 4);
        let calls = Cell::new(0);
        let mut whole = Preconditioner::new(&kss, m, 1e-10, &mut counting(&calls, usize::MAX))
            .unwrap()
            .unwrap();
        let build_total = calls.get();
        assert!(
            build_total > m / PANEL,
            "{build_total} checks building at m = {m}"
        );
        calls.set(0);
        assert!(whole
            .rescale(2.0, &mut counting(&calls, usize::MAX))
            .unwrap());
        let total = calls.get();
        assert!(total > m / PANEL, "{total} checks rescaling at m = {m}");
        for (stop_at, build_stop_at) in [(1, 1), (2, 2), (total / 2, 3), (total, build_total)] {
            let mut pre = Preconditioner::new(&kss, m, 1e-10, &mut no_check)
                .unwrap()
                .unwrap();
            calls.set(0);
            let stopped = pre.rescale(2.0, &mut counting(&calls, stop_at));
            assert!(
                matches!(stopped, Err(SvmError::Interrupted)),
                "stop at {stop_at}"
            );
            assert_eq!(calls.get(), stop_at, "checks after the error");
            assert!(pre.scale().is_nan());
            assert!(pre.rescale(2.0, &mut no_check).unwrap());
            assert!(pre
                .t
                .iter()
                .zip(&whole.t)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            calls.set(0);
            let mut stop = counting(&calls, build_stop_at);
            let built = Preconditioner::new(&kss, m, 1e-10, &mut stop);
            assert!(
                matches!(built, Err(SvmError::Interrupted)),
                "stop at {build_stop_at}"
            );
            assert_eq!(calls.get(), build_stop_at, "checks after the error");
        }
    }

    /// CG with the preconditioner solves the system to its tolerance, in fewer products than
    /// unknowns; the preconditioner is the inverse of K + a K^2 (checked by applying both).
    #[test]
    fn preconditioned_cg_solves_the_newton_system() {
        for (m, n_rows, seed) in [(30, 200, 1), (60, 500, 2), (5, 40, 3)] {
            let (kss, _, h) = system(m, n_rows, seed);
            let p = m + 1;
            let a = n_rows as f64 / m as f64;
            let mut pre = Preconditioner::new(&kss, m, 1e-10, &mut no_check)
                .unwrap()
                .unwrap();
            assert!(pre.rescale(a, &mut no_check).unwrap());
            // P^-1 (K + a K^2) v = v for v in the range where K's ridge does not matter.
            let mut rng = Rng::new(seed + 7);
            let v: Vec<f64> = (0..m).map(|_| rng.next_f64() - 0.5).collect();
            let kv: Vec<f64> = (0..m)
                .map(|i| simd::dot(&kss[i * m..(i + 1) * m], &v))
                .collect();
            let kkv: Vec<f64> = (0..m)
                .map(|i| simd::dot(&kss[i * m..(i + 1) * m], &kv))
                .collect();
            let mut pv: Vec<f64> = (0..m).map(|i| kv[i] + a * kkv[i]).collect();
            pv.push(3.0 * n_rows as f64);
            let mut back = vec![0.0; p];
            pre.apply(&pv, &mut back, n_rows as f64);
            let pk: Vec<f64> = (0..m)
                .map(|i| simd::dot(&kss[i * m..(i + 1) * m], &back[..m]))
                .collect();
            for i in 0..m {
                // Compare through K (the ridge leaves K's near-null directions free); T = L B
                // is rounded to f32 once more than the factors it is the product of.
                assert!(
                    (pk[i] - kv[i]).abs() < 1e-5 * (1.0 + kv[i].abs()),
                    "m {m} i {i}: {} against {}",
                    pk[i],
                    kv[i]
                );
            }
            assert!((back[m] - 3.0).abs() < 1e-12);
            let b: Vec<f64> = (0..p).map(|_| rng.next_f64() - 0.5).collect();
            let mut hv = |x: &[f64], out: &mut [f64]| {
                for i in 0..p {
                    out[i] = simd::dot(&h[i * p..(i + 1) * p], x);
                }
                Ok(())
            };
            let (x, products) = solve(&mut hv, &pre, n_rows as f64, &b, 1e-7, 10 * p).unwrap();
            let mut hx = vec![0.0; p];
            hv(&x, &mut hx).unwrap();
            let res: f64 = hx.iter().zip(&b).map(|(a, b)| (a - b).powi(2)).sum::<f64>();
            let bn: f64 = b.iter().map(|v| v * v).sum::<f64>();
            // The recurrence's residual drifts from the true one by rounding (H is as
            // ill-conditioned as K_SS).
            assert!(
                res.sqrt() <= 1e-5 * bn.sqrt(),
                "m {m}: residual {} after {products}",
                res.sqrt()
            );
            assert!(products <= p, "m {m}: {products} products");
        }
    }
}
