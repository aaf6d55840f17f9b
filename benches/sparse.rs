//! Dot products of one sparse row with all B sparse support vectors, four ways (issue 9 item 3):
//! an inverted index by column (`ColumnIndex`: walk the lists of the row's columns; what
//! prediction uses), a hash probe of the row per support vector entry (`RowProbe`, what training
//! uses: the index is too costly to keep up to date under merging), a sorted-index merge per
//! support vector,
//! and a scatter of the row into a dense buffer of n_features with a gather per support vector
//! (cleared after each row). Text-like data: 50 non-zeros a row over 1,000,000 columns with a
//! Zipf-like column popularity; support vectors of 50 and 400 non-zeros (merged vectors fill
//! in). `cargo bench --bench sparse`.

use budgetsvm::core::common::rng::Rng;
use budgetsvm::core::data::rows::CsrView;
use budgetsvm::core::data::sparse::{ColumnIndex, RowProbe, SparseArena};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const DIM: u64 = 1_000_000;

/// Sorted distinct columns, popular columns far more likely (rank r with weight ~ 1/r).
fn sparse_vec(rng: &mut Rng, nnz: usize) -> (Vec<u64>, Vec<f64>) {
    let mut idx: Vec<u64> = (0..nnz)
        .map(|_| {
            let r = (DIM as f64).powf(rng.next_f64()) as u64;
            (r.wrapping_mul(2_654_435_761)) % DIM
        })
        .collect();
    idx.sort_unstable();
    idx.dedup();
    let val = idx.iter().map(|_| rng.next_f64()).collect();
    (idx, val)
}

fn merge_dot(ai: &[u64], av: &[f64], bi: &[u64], bv: &[f64]) -> f64 {
    let (mut a, mut b, mut s) = (0, 0, 0.0);
    while a < ai.len() && b < bi.len() {
        match ai[a].cmp(&bi[b]) {
            std::cmp::Ordering::Less => a += 1,
            std::cmp::Ordering::Greater => b += 1,
            std::cmp::Ordering::Equal => {
                s += av[a] * bv[b];
                a += 1;
                b += 1;
            }
        }
    }
    s
}

fn bench(c: &mut Criterion) {
    let mut rng = Rng::new(1);
    let rows: Vec<_> = (0..256).map(|_| sparse_vec(&mut rng, 50)).collect();
    let mut group = c.benchmark_group("sparse_dots");
    for (b, sv_nnz) in [(200usize, 50usize), (200, 400), (500, 50)] {
        let svs: Vec<_> = (0..b).map(|_| sparse_vec(&mut rng, sv_nnz)).collect();
        let mut out = vec![0.0; b];
        let id = format!("B{b}-svnnz{sv_nnz}");
        group.throughput(Throughput::Elements(b as u64));
        let mut probe = RowProbe::new();
        let mut arena = SparseArena::new();
        for (si, sv) in &svs {
            arena.push_sparse(si, sv);
        }
        let mut r = 0;
        group.bench_function(BenchmarkId::new("hash-probe", &id), |bch| {
            bch.iter(|| {
                r = (r + 1) % rows.len();
                let (ri, rv) = &rows[r];
                probe.load_sparse(ri, rv);
                for (j, o) in out.iter_mut().enumerate() {
                    let (si, sv) = arena.get(j);
                    *o = probe.dot(si, sv);
                }
                black_box(out[0])
            })
        });
        let mut index_rows = vec![0usize];
        let (mut index_cols, mut index_vals) = (Vec::new(), Vec::new());
        for (si, sv) in &svs {
            index_cols.extend_from_slice(si);
            index_vals.extend_from_slice(sv);
            index_rows.push(index_cols.len());
        }
        let index = ColumnIndex::from_csr(&index_rows, &index_cols, &index_vals);
        let row_csr: Vec<_> = rows
            .iter()
            .map(|(ri, _)| {
                (
                    vec![0i64, ri.len() as i64],
                    ri.iter().map(|&c| c as i64).collect::<Vec<_>>(),
                )
            })
            .collect();
        group.bench_function(BenchmarkId::new("inverted-index", &id), |bch| {
            bch.iter(|| {
                r = (r + 1) % rows.len();
                let (ip, ix) = &row_csr[r];
                let x = CsrView::new(ip, ix, &rows[r].1, DIM as usize).unwrap();
                index.dots_with_row(&x, 0, &mut out);
                black_box(out[0])
            })
        });
        group.bench_function(BenchmarkId::new("sorted-merge", &id), |bch| {
            bch.iter(|| {
                r = (r + 1) % rows.len();
                let (ri, rv) = &rows[r];
                for (o, (si, sv)) in out.iter_mut().zip(&svs) {
                    *o = merge_dot(ri, rv, si, sv);
                }
                black_box(out[0])
            })
        });
        let mut dense = vec![0.0; DIM as usize];
        group.bench_function(BenchmarkId::new("dense-scatter", &id), |bch| {
            bch.iter(|| {
                r = (r + 1) % rows.len();
                let (ri, rv) = &rows[r];
                for (&c, &v) in ri.iter().zip(rv) {
                    dense[c as usize] = v;
                }
                for (o, (si, sv)) in out.iter_mut().zip(&svs) {
                    *o = si
                        .iter()
                        .zip(sv)
                        .map(|(&c, &v)| v * dense[c as usize])
                        .sum();
                }
                for &c in ri {
                    dense[c as usize] = 0.0;
                }
                black_box(out[0])
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
