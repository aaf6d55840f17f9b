//! Embeds the default merge lookup tables (400 x 400 values of h* and wd / m^2, by precise golden
//! section search): computed here once per build instead of in every process on its first fit.

#[allow(dead_code)]
#[path = "src/core/budget/merge_math.rs"]
mod merge_math;

fn main() {
    println!("cargo:rerun-if-changed=src/core/budget/merge_math.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let n = merge_math::DEFAULT_TABLE_SIZE;
    let mut h = vec![0.0; n * n];
    let mut wd = vec![0.0; n * n];
    for (i, (hrow, wdrow)) in h.chunks_mut(n).zip(wd.chunks_mut(n)).enumerate() {
        merge_math::table_row(i, n, hrow, wdrow);
    }
    let mut bytes = Vec::with_capacity(16 * n * n);
    for v in h.iter().chain(&wd) {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("merge_table.bin");
    std::fs::write(out, bytes).expect("writing the merge table");
}
