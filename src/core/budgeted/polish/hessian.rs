//! Hessian-free products H v: from the squared rows' copies, and for the rows without a copy
//! from their kernel values computed again.

use rayon::prelude::*;

use crate::core::budgeted::conjugate_gradient;
use crate::core::common::error::Result;
use crate::core::common::parallel;
use crate::core::data::rows::{AnyRows, Rows, SubsetRows};
use crate::core::kernels::kernel_block::{BlockScratch, KernelBlocks};
use crate::core::simd;

use super::copies::SquaredRows;
use super::segments::{segment_rows, Passes};

/// Squared rows per chunk of a Hessian product (fixed: the sums do not depend on threads).
pub(super) const PRODUCT_CHUNK: usize = 2048;
/// Kernel values per wave of a product that computes its rows again (`recomputed_product`),
/// at least: a fraction of a second, Ctrl-C between waves (a whole product is 1.2e9 values,
/// seconds, at a million rows and B = 10,000).
const RECOMPUTED_WAVE_VALUES: usize = 1 << 27;

/// out = H v for one output's Newton system (`kss` in f32, its lower triangle read): (K_SS + ridge) v_beta + 2C sum_Q w (k . v_beta +
/// v_b) k, and 2C sum_Q w (k . v_beta + v_b) for the intercept; the squared rows in fixed
/// chunks in parallel, the chunks' parts added in order. Rows in halves are multiplied in f32
/// arithmetic (their values are good to 5e-4, the sums to about 1e-6: twice the lanes and no
/// widening per value, which made the products compute-bound), rows in f32 in f64.
pub(super) fn hessian_product(
    kss: &[f32],
    ridge: f64,
    c: f64,
    rows: &SquaredRows<'_>,
    m: usize,
    v: &[f64],
    out: &mut [f64],
) {
    let (vb, vbeta) = (v[m], &v[..m]);
    let row_parts = || -> Vec<Vec<f64>> {
        match rows {
            SquaredRows::Half(rows) => {
                let v32: Vec<f32> = vbeta.iter().map(|&x| x as f32).collect();
                parallel::install(|| {
                    rows.par_chunks(PRODUCT_CHUNK)
                        .map(|chunk| {
                            let mut acc = vec![0.0f32; m];
                            let mut intercept = 0.0;
                            for &(row, w) in chunk {
                                let t = 2.0 * c * w * (f64::from(simd::dot_half(row, &v32)) + vb);
                                simd::axpy_half(t as f32, row, &mut acc);
                                intercept += t;
                            }
                            let mut part: Vec<f64> = acc.iter().map(|&a| f64::from(a)).collect();
                            part.push(intercept);
                            part
                        })
                        .collect()
                })
            }
            SquaredRows::Single(rows) => parallel::install(|| {
                rows.par_chunks(PRODUCT_CHUNK)
                    .map(|chunk| {
                        let mut acc = vec![0.0; m + 1];
                        for &(row, w) in chunk {
                            let t = 2.0 * c * w * (simd::dot_narrow(row, vbeta) + vb);
                            simd::axpy_narrow(t, row, &mut acc[..m]);
                            acc[m] += t;
                        }
                        acc
                    })
                    .collect()
            }),
        }
    };
    // The K_SS part beside the rows' chunks: on its own it is a parallel region too short
    // for the second thread to join (a subsample's products at m ~ 1,000).
    let (parts, ()) = parallel::install(|| {
        rayon::join(row_parts, || {
            conjugate_gradient::symmetric_product(kss, m, vbeta, &mut out[..m])
        })
    });
    for (o, x) in out[..m].iter_mut().zip(vbeta) {
        *o += ridge * x;
    }
    out[m] = 0.0;
    for part in &parts {
        for (o, a) in out.iter_mut().zip(part) {
            *o += a;
        }
    }
}

/// Adds to `out` (H v from the copied rows) the terms of the squared rows without a copy
/// (`rows`: (row, weight) in row order): their kernel values computed again from the source,
/// in f32 as the gather computes them, rounded to halves when the copies are, so a row adds
/// the same whether it was copied or not. Parts of `PRODUCT_CHUNK` rows in parallel (kernel
/// blocks of `segment_rows` within, for L2 as a pass's segments), added in order: the same sums on any thread count.
/// In waves of whole chunks (`RECOMPUTED_WAVE_VALUES`, the same number per thread), the
/// monitor (Ctrl-C) before each.
pub(super) fn recomputed_product(
    passes: &mut Passes<'_>,
    rows: &[(usize, f64)],
    half: bool,
    c: f64,
    v: &[f64],
    out: &mut [f64],
) -> Result<()> {
    let Passes {
        blocks,
        source,
        monitor,
        progress,
        ..
    } = passes;
    let blocks: &KernelBlocks = blocks;
    let m = blocks.n_basis();
    if m == 0 || rows.is_empty() {
        return Ok(());
    }
    let (vb, vbeta) = (v[m], &v[..m]);
    let v32: Vec<f32> = vbeta.iter().map(|&x| x as f32).collect();
    // Whole chunks, as many per thread: a wave's last chunks do not leave threads idle.
    let threads = rayon::current_num_threads().max(1);
    let chunks = RECOMPUTED_WAVE_VALUES.div_ceil(PRODUCT_CHUNK * m);
    let wave = PRODUCT_CHUNK * chunks.next_multiple_of(threads);
    let product = Product {
        half,
        c,
        vbeta,
        v32: &v32,
        vb,
    };
    let mut next = 0;
    source.pass(&mut |first, block| {
        let end = first + block.n_rows();
        let count = rows[next..].partition_point(|&(i, _)| i < end);
        let mine = &rows[next..next + count];
        next += count;
        for mine in mine.chunks(wave) {
            monitor(progress)?;
            recomputed_wave(blocks, block, first, mine, &product, out);
        }
        Ok(())
    })
}

/// The direction a product of recomputed rows multiplies: v_beta (in f64, and in f32 for rows
/// in halves), v_b, the C of 2C, and whether the rows are rounded to halves as the copies are.
struct Product<'a> {
    half: bool,
    c: f64,
    vbeta: &'a [f64],
    v32: &'a [f32],
    vb: f64,
}

/// `recomputed_product`'s terms of the rows `mine` (of the block whose first row is `first`).
fn recomputed_wave(
    blocks: &KernelBlocks,
    block: &AnyRows<'_>,
    first: usize,
    mine: &[(usize, f64)],
    product: &Product<'_>,
    out: &mut [f64],
) {
    let Product {
        half,
        c,
        vbeta,
        v32,
        vb,
    } = *product;
    let m = blocks.n_basis();
    let parts: Vec<Vec<f64>> = parallel::install(|| {
        mine.par_chunks(PRODUCT_CHUNK)
            .map_init(
                || {
                    let buffers = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                    (BlockScratch::default(), buffers)
                },
                |(scratch, (values, halves, index, norms)), chunk| {
                    let mut acc = vec![0.0; m + 1];
                    let mut acc32 = vec![0.0f32; if half { m } else { 0 }];
                    for group in chunk.chunks(segment_rows(m, true)) {
                        index.clear();
                        index.extend(group.iter().map(|&(i, _)| i - first));
                        let subset = SubsetRows::new(block, index).expect("block-local rows");
                        norms.clear();
                        norms.extend((0..group.len()).map(|r| subset.sq_norm(r)));
                        values.resize(group.len() * m, 0.0f32);
                        blocks.fill_rows_f32(&subset, 0..group.len(), norms, values, scratch);
                        for (row, &(_, w)) in values.chunks_exact(m).zip(group) {
                            if half {
                                halves.clear();
                                simd::extend_f16(row, halves);
                                let dot = f64::from(simd::dot_half(halves, v32));
                                let t = 2.0 * c * w * (dot + vb);
                                simd::axpy_half(t as f32, halves, &mut acc32);
                                acc[m] += t;
                            } else {
                                let t = 2.0 * c * w * (simd::dot_narrow(row, vbeta) + vb);
                                simd::axpy_narrow(t, row, &mut acc[..m]);
                                acc[m] += t;
                            }
                        }
                    }
                    if half {
                        for (a, &b) in acc.iter_mut().zip(&acc32) {
                            *a = f64::from(b);
                        }
                    }
                    acc
                },
            )
            .collect()
    });
    for part in &parts {
        for (o, a) in out.iter_mut().zip(part) {
            *o += a;
        }
    }
}
