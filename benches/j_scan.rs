//! pWSS's j scan (`simd::j_scan`) at every SIMD level this CPU runs: one run of 2,048 j
//! candidates for an i, with the previous pair's look-ahead update, over positions in a row
//! (I_low dense) or with gaps (70% and 40% of the positions), the RBF kernel's equal diagonal or
//! a varying one. The values are those of a solve in progress: a spread of violations below i's,
//! so most candidates qualify as j and the best j tightens as the scan goes.
//! `cargo bench --bench j_scan` (criterion prints each level's time per run).

use budgetsvm::core::common::rng::Rng;
use budgetsvm::core::simd::{j_scan, levels_here, JScanInput};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const CANDIDATES: usize = 2048;

struct Run {
    t: Vec<u32>,
    v: Vec<f64>,
    diag: Vec<f64>,
    rows: [Vec<f32>; 3],
}

fn run(density: f64, equal_diag: bool, rng: &mut Rng) -> Run {
    let span = (CANDIDATES as f64 / density).ceil() as usize;
    let mut positions: Vec<usize> = (0..span).collect();
    rng.shuffle(&mut positions);
    let mut t: Vec<u32> = positions[..CANDIDATES].iter().map(|&p| p as u32).collect();
    t.sort_unstable();
    let v = (0..CANDIDATES).map(|_| -2.0 * rng.next_f64()).collect();
    let diag = (0..span)
        .map(|_| {
            if equal_diag {
                1.0
            } else {
                0.5 + rng.next_f64()
            }
        })
        .collect();
    let mut row = || -> Vec<f32> { (0..span).map(|_| rng.next_f64() as f32).collect() };
    let rows = [row(), row(), row()];
    Run { t, v, diag, rows }
}

fn bench_j_scan(c: &mut Criterion) {
    let mut rng = Rng::new(7);
    let mut group = c.benchmark_group("j_scan");
    group.throughput(Throughput::Elements(CANDIDATES as u64));
    for (density, equal_diag) in [(1.0, true), (0.7, true), (0.4, true), (0.7, false)] {
        let data = run(density, equal_diag, &mut rng);
        let input = JScanInput {
            t: &data.t,
            diag: &data.diag,
            equal_diag,
            j0: 0,
            i: data.t.len() / 2,
            vi: 0.5,
            row_i: &data.rows[0],
            // A tiny step: the values barely move from one iteration to the next.
            update: Some((&data.rows[1], &data.rows[2], 1e-300)),
            label: None,
            tau: 1e-12,
        };
        let case = format!(
            "density {density} diag {}",
            if equal_diag { "equal" } else { "varying" }
        );
        for level in levels_here() {
            let mut v = data.v.clone();
            group.bench_with_input(
                BenchmarkId::new(format!("{level:?}"), &case),
                &input,
                |b, input| b.iter(|| black_box(j_scan(level, &mut v, black_box(input)))),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench_j_scan);
criterion_main!(benches);
