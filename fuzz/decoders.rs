//! Mutation fuzzing of the decoders that read bytes from outside: the LIBSVM parser (whole files
//! and in chunks, plain and compressed) and the BSGD stream state (pickles). Every input must
//! give a value or an error, never a panic, and the chunked reader must agree with the whole-file
//! parser on every input.
//!
//! `cargo test --release --test fuzz` runs a bounded budget (a few seconds, part of CI);
//! `FUZZ_SECONDS=600 cargo test --release --test fuzz -- --nocapture` runs longer and prints the
//! executions, panics and outcome coverage (the distinct error kinds reached, a proxy for the
//! parser paths exercised), which `benchmarks/fuzz.py` writes to docs/fuzz.md.
//!
//! Not coverage-guided (cargo-fuzz needs a nightly toolchain and libFuzzer); the mutations are
//! structure-aware instead: token swaps, separators, huge and negative numbers, truncation,
//! splicing of two seeds, bit flips.

use std::collections::BTreeMap;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use budgetsvm::core::budgeted::bsgd::{BsgdParams, BsgdState};
use budgetsvm::core::budgeted::problem::{Targets, Task};
use budgetsvm::core::common::progress::no_monitor;
use budgetsvm::core::common::rng::Rng;
use budgetsvm::core::data::libsvm::{parse_libsvm, LibsvmChunks};
use budgetsvm::core::data::rows::DenseView;

const SEEDS: &[&str] = &[
    "1 1:0.5 3:1\n-1 2:2\n",
    "+1 qid:3 1:1 4:2.5 # comment\r\n\r\n-1 qid:3 2:-1e2\r\n",
    "2.5\t1:0.25   3:7\n# end",
    "1 1000000000000:1\n0 1:1e-300 2:-1e300\n",
    "3 1:1 2:2 3:3 4:4 5:5 6:6 7:7 8:8\n-3 9:9\n",
    "1\x0b1:1\x0c2:3\n",
];

const TOKENS: &[&str] = &[
    " ",
    "\t",
    "\n",
    "\r\n",
    "#",
    ":",
    "qid:",
    "0",
    "1",
    "-1",
    "+1",
    "1e308",
    "1e-320",
    "nan",
    "inf",
    "-inf",
    "18446744073709551616",
    "9223372036854775807",
    "0x1",
    "1.5.5",
    "",
    "::",
    "\x0b",
    "\x0c",
    "\0",
    "\u{fffd}",
    "99999999999999999999999999:1",
    "1:",
    ":1",
    "1:1:1",
];

/// One mutation of `input` (or a splice with another seed).
fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let at = if out.is_empty() {
            0
        } else {
            rng.below(out.len() + 1)
        };
        match rng.below(7) {
            0 if !out.is_empty() => {
                let k = rng.below(out.len());
                out[k] ^= 1 << rng.below(8);
            }
            1 => {
                let token = TOKENS[rng.below(TOKENS.len())].as_bytes();
                out.splice(at..at, token.iter().copied());
            }
            2 if !out.is_empty() => {
                let end = (at + 1 + rng.below(8)).min(out.len());
                out.drain(at.min(end)..end);
            }
            3 => out.truncate(at),
            4 => {
                let other = SEEDS[rng.below(SEEDS.len())].as_bytes();
                let from = rng.below(other.len());
                out.splice(at..at, other[from..].iter().copied());
            }
            5 if !out.is_empty() => {
                // Repeat a slice: long lines, many rows.
                let end = (at + rng.below(16)).min(out.len());
                let piece = out[at.min(end)..end].to_vec();
                for _ in 0..rng.below(50) {
                    out.splice(at..at, piece.iter().copied());
                }
            }
            _ => {
                let token = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let end = (at + token.len()).min(out.len());
                out.splice(at..end, token.iter().copied());
            }
        }
    }
    out
}

/// The kind of an outcome: "ok" or the error message up to its first detail.
fn kind(result: &Result<impl Sized, impl std::fmt::Display>) -> String {
    match result {
        Ok(_) => "ok".to_string(),
        Err(e) => {
            let text = e.to_string();
            // "source, line N: message" -> "message"
            let text = match text.split_once(", line ") {
                Some((_, rest)) => rest.split_once(": ").map_or(rest, |(_, m)| m).to_string(),
                None => text,
            };
            text.chars()
                .take_while(|c| !c.is_ascii_digit() && *c != '"')
                .collect::<String>()
                .trim()
                .to_string()
        }
    }
}

#[derive(Default)]
struct Report {
    executions: u64,
    panics: u64,
    outcomes: BTreeMap<String, u64>,
}

impl Report {
    fn print(&self, name: &str, seconds: f64) {
        println!(
            "fuzz {name}: {} executions in {seconds:.1} s, {} panics, {} distinct outcomes",
            self.executions,
            self.panics,
            self.outcomes.len()
        );
        for (k, n) in &self.outcomes {
            println!("  {n:>9}  {k}");
        }
    }
}

fn budget() -> Duration {
    let seconds = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(seconds)
}

#[test]
fn libsvm_parser_never_panics_and_chunks_agree() {
    let dir = std::env::temp_dir().join(format!("budgetsvm-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("input.svm");
    let gz_path = dir.join("input.svm.gz");
    let mut rng = Rng::new(2024);
    let mut report = Report::default();
    let start = Instant::now();
    let limit = budget();
    while start.elapsed() < limit {
        let seed = SEEDS[rng.below(SEEDS.len())].as_bytes();
        let input = mutate(&mut rng, seed);
        report.executions += 1;
        let whole = catch_unwind(AssertUnwindSafe(|| parse_libsvm(&input, "fuzz")));
        let Ok(whole) = whole else {
            report.panics += 1;
            eprintln!("panic on {:?}", String::from_utf8_lossy(&input));
            continue;
        };
        *report.outcomes.entry(kind(&whole)).or_default() += 1;
        // Every 16th input also through the chunked reader, plain or gzip, with small chunks.
        if report.executions % 16 == 0 {
            let compressed = rng.below(2) == 0;
            let target = if compressed { &gz_path } else { &path };
            let file = std::fs::File::create(target).unwrap();
            if compressed {
                let mut enc = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
                enc.write_all(&input).unwrap();
                enc.finish().unwrap();
            } else {
                let mut file = file;
                file.write_all(&input).unwrap();
            }
            let chunk_lines = 1 + rng.below(3);
            let chunked = catch_unwind(AssertUnwindSafe(|| -> Result<Vec<f64>, String> {
                let mut chunks =
                    LibsvmChunks::open(target, chunk_lines).map_err(|e| e.to_string())?;
                let mut labels = Vec::new();
                while let Some(c) = chunks.next_chunk().map_err(|e| e.to_string())? {
                    labels.extend(c.labels);
                }
                Ok(labels)
            }));
            match (chunked, &whole) {
                (Err(_), _) => {
                    report.panics += 1;
                    eprintln!("chunked panic on {:?}", String::from_utf8_lossy(&input));
                }
                (Ok(Ok(labels)), Ok(data)) => {
                    let same = labels.len() == data.labels.len()
                        && labels
                            .iter()
                            .zip(&data.labels)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "chunked labels differ on {:?}",
                        String::from_utf8_lossy(&input)
                    );
                }
                (Ok(Err(_)), Err(_)) => {}
                (Ok(a), b) => panic!(
                    "chunked and whole reads disagree on {:?}: {} vs {}",
                    String::from_utf8_lossy(&input),
                    a.is_ok(),
                    b.is_ok()
                ),
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    report.print("libsvm parser", start.elapsed().as_secs_f64());
    assert_eq!(report.panics, 0);
    assert!(
        report.outcomes.len() > 5,
        "the mutations reach too few outcomes"
    );
}

#[test]
fn bsgd_state_decoder_never_panics() {
    // Valid states of several shapes as seeds: dense and sparse stores, binary and multi-class.
    let mut rng = Rng::new(7);
    let xs: Vec<f64> = (0..600).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
    let x = DenseView::new(&xs, 200, 3).unwrap();
    let mut seeds = Vec::new();
    let values: Vec<f64> = (0..200).map(|i| (i as f64 * 0.1).sin()).collect();
    for (n_classes, budget) in [(2usize, 5usize), (3, 8), (2, 40), (0, 12)] {
        let y: Vec<u32> = (0..200).map(|i| (i % n_classes.max(1)) as u32).collect();
        let params = BsgdParams {
            budget,
            gamma: 1.0,
            ..Default::default()
        }
        .check(200)
        .unwrap();
        // 0 classes: a regression run.
        let (task, targets) = if n_classes == 0 {
            let targets = Targets::Values {
                y: &values,
                epsilon: 0.1,
            };
            (targets.task(), targets)
        } else {
            (Task::Classes(n_classes), Targets::classes(&y, n_classes))
        };
        let mut state = BsgdState::new(&params, 3, task, 100).unwrap();
        state
            .pass(&x, targets, None, 1, 1, &mut no_monitor)
            .unwrap();
        let bytes = state.to_bytes();
        // The checksummed current version and the version 2 layout without the checksum, whose
        // decoder then sees the damaged bytes themselves.
        let mut v2 = bytes[..bytes.len() - 8].to_vec();
        v2[8 + "budgetsvm-bsgd-state".len()] = 2;
        seeds.push(bytes);
        seeds.push(v2);
    }
    let mut report = Report::default();
    let start = Instant::now();
    let limit = budget();
    while start.elapsed() < limit {
        let seed = &seeds[rng.below(seeds.len())];
        let mut input = seed.clone();
        for _ in 0..1 + rng.below(3) {
            match rng.below(4) {
                0 => {
                    let k = rng.below(input.len());
                    input[k] ^= 1 << rng.below(8);
                }
                1 => {
                    // A plausible-looking size: small, huge or zero, at a random 8-byte slot.
                    let k = rng.below(input.len().saturating_sub(8).max(1));
                    let v: u64 = [0, 1, 3, u64::MAX, 1 << 40, 1 << 62][rng.below(6)];
                    let width = 8.min(input.len() - k);
                    input[k..k + width].copy_from_slice(&v.to_le_bytes()[..width]);
                }
                2 => input.truncate(rng.below(input.len() + 1)),
                _ => {
                    let k = rng.below(input.len() + 1);
                    input.splice(k..k, (0..rng.below(32)).map(|_| rng.below(256) as u8));
                }
            }
            if input.is_empty() {
                break;
            }
        }
        report.executions += 1;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let decoded = BsgdState::from_bytes(&input);
            if let Ok(mut s) = BsgdState::from_bytes(&input) {
                // A state that loads must also train.
                match s.task() {
                    Task::Classes(n) if s.dim() == 3 && n <= 3 => {
                        let y: Vec<u32> = (0..200).map(|i| (i % n) as u32).collect();
                        let targets = Targets::classes(&y, n);
                        let _ = s.pass(&x, targets, None, 1, 1, &mut no_monitor);
                    }
                    Task::Regression { epsilon } if s.dim() == 3 => {
                        let targets = Targets::Values {
                            y: &values,
                            epsilon,
                        };
                        let _ = s.pass(&x, targets, None, 1, 1, &mut no_monitor);
                    }
                    _ => {}
                }
            }
            decoded.map(|_| ())
        }));
        match outcome {
            Ok(result) => *report.outcomes.entry(kind(&result)).or_default() += 1,
            Err(_) => report.panics += 1,
        }
    }
    report.print("BSGD state decoder", start.elapsed().as_secs_f64());
    assert_eq!(report.panics, 0);
}
