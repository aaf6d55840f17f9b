//! The micro-kernels of the dense products on the vector levels: tiles of sums held in
//! registers, each sum in k order.

use super::{levels, Simd};
use crate::core::simd::tiles::{ProductTile, ProductTileF32, PRODUCT_TILE_ROWS};

/// `product_tile`: `PRODUCT_TILE_ROWS` x 2 vectors of sums held in registers (12 of AVX2's 16),
/// each step over k two loads of the packed panel and one broadcast per row.
///
/// # Safety
/// The bounds checked by `product_tile`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn product_tile_on<S: Simd>(s: S, tile: ProductTile<'_>, out: &mut [f64]) {
    let ProductTile(a, a_stride, rows, panel, kc) = tile;
    let w = S::LANES;
    let mut acc0 = [s.zero(); PRODUCT_TILE_ROWS];
    let mut acc1 = [s.zero(); PRODUCT_TILE_ROWS];
    // Rows past `rows` repeat the last one (read, never stored).
    let row: [*const f64; PRODUCT_TILE_ROWS] =
        std::array::from_fn(|r| a[r.min(rows - 1) * a_stride..].as_ptr());
    let pb = panel.as_ptr();
    // SAFETY: the caller checked a's rows hold kc values from each row start and the panel
    // kc * 2 w.
    unsafe {
        for k in 0..kc {
            let b0 = s.load(pb.add(k * 2 * w));
            let b1 = s.load(pb.add(k * 2 * w + w));
            for r in 0..PRODUCT_TILE_ROWS {
                let ar = s.splat(*row[r].add(k));
                acc0[r] = s.fmadd(ar, b0, acc0[r]);
                acc1[r] = s.fmadd(ar, b1, acc1[r]);
            }
        }
        let po = out.as_mut_ptr();
        for r in 0..rows {
            s.store(po.add(r * 2 * w), acc0[r]);
            s.store(po.add(r * 2 * w + w), acc1[r]);
        }
    }
}

/// `product_tile_f32`: `product_tile_on` in f32, two vectors of 2 `LANES` floats per row.
///
/// # Safety
/// The bounds checked by `product_tile_f32`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn product_tile_f32_on<S: Simd>(s: S, tile: ProductTileF32<'_>, out: &mut [f32]) {
    let ProductTileF32(a, a_stride, rows, panel, kc) = tile;
    let w = 2 * S::LANES;
    let mut acc0 = [s.zero_ps(); PRODUCT_TILE_ROWS];
    let mut acc1 = [s.zero_ps(); PRODUCT_TILE_ROWS];
    let row: [*const f32; PRODUCT_TILE_ROWS] =
        std::array::from_fn(|r| a[r.min(rows - 1) * a_stride..].as_ptr());
    let pb = panel.as_ptr();
    // SAFETY: as `product_tile_on`, in floats.
    unsafe {
        for k in 0..kc {
            let b0 = s.load_ps(pb.add(k * 2 * w));
            let b1 = s.load_ps(pb.add(k * 2 * w + w));
            for r in 0..PRODUCT_TILE_ROWS {
                let ar = s.splat_ps(*row[r].add(k));
                acc0[r] = s.fmadd_ps(ar, b0, acc0[r]);
                acc1[r] = s.fmadd_ps(ar, b1, acc1[r]);
            }
        }
        let po = out.as_mut_ptr();
        for r in 0..rows {
            s.store_ps(po.add(r * 2 * w), acc0[r]);
            s.store_ps(po.add(r * 2 * w + w), acc1[r]);
        }
    }
}

levels! {
    /// A tile of a matrix product against a packed panel (`product_tile_on`).
    fn product_tile(tile: ProductTile<'_>, out: &mut [f64])
        = product_tile_on in product_tile_avx2, product_tile_avx512;
    /// `product_tile_f32_on`.
    fn product_tile_f32(tile: ProductTileF32<'_>, out: &mut [f32])
        = product_tile_f32_on in product_tile_f32_avx2, product_tile_f32_avx512;
}
