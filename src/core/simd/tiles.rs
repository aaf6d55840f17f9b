//! The register-blocked tiles of the dense matrix products (the polish's factorisations): their
//! widths on this machine, their operands once checked, and the portable loops (`x86/tiles.rs`
//! holds the vector ones).

use super::{level, Level};

/// Rows of a `product_tile`.
pub const PRODUCT_TILE_ROWS: usize = 6;

/// Columns of a `product_tile` (the width of a packed panel) on this machine's level: two
/// vectors of doubles.
pub fn product_tile_columns() -> usize {
    match level() {
        Level::Avx512 => 16,
        _ => 8,
    }
}

/// Columns of a `product_tile_f32`: two vectors of floats.
pub fn product_tile_f32_columns() -> usize {
    2 * product_tile_columns()
}

/// `product_tile`'s operands once checked: rows of `a` (stride, count), the packed panel and
/// the length k of the sums.
#[derive(Clone, Copy)]
pub(crate) struct ProductTile<'a>(
    pub &'a [f64],
    pub usize,
    pub usize,
    pub &'a [f64],
    pub usize,
);

/// `product_tile` on the portable level (`nr` columns): each sum fused, in k order.
pub(super) fn product_tile_portable(tile: ProductTile<'_>, nr: usize, out: &mut [f64]) {
    let ProductTile(a, a_stride, rows, panel, kc) = tile;
    for r in 0..rows {
        for j in 0..nr {
            let mut sum = 0.0;
            for k in 0..kc {
                sum = a[r * a_stride + k].mul_add(panel[k * nr + j], sum);
            }
            out[r * nr + j] = sum;
        }
    }
}

/// `product_tile_f32`'s operands once checked (as `ProductTile`'s).
#[derive(Clone, Copy)]
pub(crate) struct ProductTileF32<'a>(
    pub &'a [f32],
    pub usize,
    pub usize,
    pub &'a [f32],
    pub usize,
);

/// `product_tile_f32` on the portable level (`nr` columns).
pub(super) fn product_tile_f32_portable(tile: ProductTileF32<'_>, nr: usize, out: &mut [f32]) {
    let ProductTileF32(a, a_stride, rows, panel, kc) = tile;
    for r in 0..rows {
        for j in 0..nr {
            let mut sum = 0.0f32;
            for k in 0..kc {
                sum = a[r * a_stride + k].mul_add(panel[k * nr + j], sum);
            }
            out[r * nr + j] = sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    #[cfg(target_arch = "x86_64")]
    use crate::core::simd::x86::{self, vector_levels};
    use crate::core::simd::{product_tile, product_tile_f32};

    /// Every level's tile is the sums in k order of the fused products, for 1 to 6 rows.
    #[test]
    fn product_tiles_are_the_fused_sums_on_every_level() {
        let mut rng = Rng::new(21);
        for kc in [0, 1, 5, 64, 257] {
            for rows in 1..=PRODUCT_TILE_ROWS {
                let a_stride = kc + 3;
                let a: Vec<f64> = (0..rows * a_stride).map(|_| rng.next_f64() - 0.5).collect();
                let check = |nr: usize, tile: &dyn Fn(&[f64], &mut [f64])| {
                    let panel: Vec<f64> = (0..kc * nr).map(|i| (i as f64 * 0.37).sin()).collect();
                    let mut out = vec![f64::NAN; rows * nr];
                    tile(&panel, &mut out);
                    for r in 0..rows {
                        for j in 0..nr {
                            let want = (0..kc).fold(0.0, |s: f64, k| {
                                a[r * a_stride + k].mul_add(panel[k * nr + j], s)
                            });
                            assert_eq!(out[r * nr + j], want, "kc {kc} rows {rows} nr {nr}");
                        }
                    }
                };
                check(product_tile_columns(), &|panel, out| {
                    product_tile(&a, a_stride, rows, panel, kc, out)
                });
                #[cfg(target_arch = "x86_64")]
                for level in vector_levels() {
                    let nr = match level {
                        x86::Vector::Avx2(_) => 8,
                        x86::Vector::Avx512(_) => 16,
                    };
                    check(nr, &|panel, out| {
                        // SAFETY: the level runs here; the bounds hold for its width.
                        unsafe {
                            x86::tiles::product_tile(
                                level,
                                ProductTile(&a, a_stride, rows, panel, kc),
                                out,
                            )
                        }
                    });
                }
            }
        }
    }

    /// The f32 tile likewise: fused f32 sums in k order on every level.
    #[test]
    fn f32_product_tiles_are_the_fused_sums_on_every_level() {
        let mut rng = Rng::new(22);
        for kc in [0, 1, 5, 64, 257] {
            for rows in 1..=PRODUCT_TILE_ROWS {
                let a_stride = kc + 3;
                let a: Vec<f32> = (0..rows * a_stride)
                    .map(|_| rng.next_f64() as f32 - 0.5)
                    .collect();
                let check = |nr: usize, tile: &dyn Fn(&[f32], &mut [f32])| {
                    let panel: Vec<f32> = (0..kc * nr).map(|i| (i as f32 * 0.37).sin()).collect();
                    let mut out = vec![f32::NAN; rows * nr];
                    tile(&panel, &mut out);
                    for r in 0..rows {
                        for j in 0..nr {
                            let want = (0..kc).fold(0.0, |s: f32, k| {
                                a[r * a_stride + k].mul_add(panel[k * nr + j], s)
                            });
                            assert_eq!(out[r * nr + j], want, "kc {kc} rows {rows} nr {nr}");
                        }
                    }
                };
                check(product_tile_f32_columns(), &|panel, out| {
                    product_tile_f32(&a, a_stride, rows, panel, kc, out)
                });
                #[cfg(target_arch = "x86_64")]
                for level in vector_levels() {
                    let nr = match level {
                        x86::Vector::Avx2(_) => 16,
                        x86::Vector::Avx512(_) => 32,
                    };
                    check(nr, &|panel, out| {
                        // SAFETY: the level runs here; the bounds hold for its width.
                        unsafe {
                            x86::tiles::product_tile_f32(
                                level,
                                ProductTileF32(&a, a_stride, rows, panel, kc),
                                out,
                            )
                        }
                    });
                }
            }
        }
    }
}
