//! The reader's tests: every format, every malformed line with its number, chunks, summaries.

use super::parse::{chunk_bounds, fast_float, parse_float, parse_in_chunks};
use super::*;
use std::io::{self, Write};
use std::path::PathBuf;

fn parse(text: &str) -> LibsvmData {
    match parse_libsvm(text.as_bytes(), "<bytes>") {
        Ok(d) => d,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// Parses text that must fail; returns (line, message).
fn parse_err(text: &str) -> (usize, String) {
    match parse_libsvm(text.as_bytes(), "test.svm") {
        Ok(d) => panic!("expected an error, got {d:?}"),
        Err(SvmError::Parse {
            source_name,
            line,
            message,
        }) => {
            assert_eq!(source_name, "test.svm");
            (line, message)
        }
        Err(e) => panic!("expected a parse error, got {e}"),
    }
}

fn assert_err(text: &str, line: usize, needle: &str) {
    let (l, m) = parse_err(text);
    assert_eq!(l, line, "line of {m:?} for {text:?}");
    assert!(
        m.contains(needle),
        "message {m:?} should contain {needle:?}"
    );
}

fn assert_same(a: &LibsvmData, b: &LibsvmData) {
    assert_eq!(a.labels.len(), b.labels.len());
    assert_eq!(a.indptr, b.indptr);
    assert_eq!(a.indices, b.indices);
    assert_eq!(a.n_features, b.n_features);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a.labels), bits(&b.labels));
    assert_eq!(bits(&a.values), bits(&b.values));
}

/// xorshift64*: enough randomness for generating test inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn basic_rows() {
    let d = parse("1 1:0.5 3:-2\n-1 2:1e3\n");
    assert_eq!(d.labels, vec![1.0, -1.0]);
    assert_eq!(d.indptr, vec![0, 2, 3]);
    assert_eq!(d.indices, vec![0, 2, 1]);
    assert_eq!(d.values, vec![0.5, -2.0, 1000.0]);
    assert_eq!(d.n_features, 3);
    assert_eq!(d.n_rows(), 2);
}

#[test]
fn label_forms() {
    let d = parse("+1\n-1\n0\n1\n3\n-1.0\n2.5e0\n+0.5\n1.\n.5\n");
    assert_eq!(
        d.labels,
        vec![1.0, -1.0, 0.0, 1.0, 3.0, -1.0, 2.5, 0.5, 1.0, 0.5]
    );
    assert_eq!(d.indptr, vec![0; 11]);
    assert_eq!(d.n_features, 0);
}

#[test]
fn no_trailing_newline() {
    let d = parse("1 1:1\n2 2:2");
    assert_eq!(d.labels, vec![1.0, 2.0]);
    assert_eq!(d.indices, vec![0, 1]);
}

#[test]
fn separators_tabs_and_runs_of_spaces() {
    let d = parse("  1\t1:2   \t 4:5\t\n\t-1   2:3  ");
    assert_eq!(d.labels, vec![1.0, -1.0]);
    assert_eq!(d.indices, vec![0, 3, 1]);
    assert_eq!(d.values, vec![2.0, 5.0, 3.0]);
}

#[test]
fn crlf_line_endings() {
    let d = parse("1 1:2 3:4\r\n-1 2:1\r\n\r\n# c\r\n1\r\n");
    assert_eq!(d.labels, vec![1.0, -1.0, 1.0]);
    assert_eq!(d.indptr, vec![0, 2, 3, 3]);
    assert_eq!(d.values, vec![2.0, 4.0, 1.0]);
    assert_err("1 1:2\r\n\r\n1 x\r\n", 3, "missing ':' in \"x\"");
}

#[test]
fn comments_and_blank_lines() {
    let text = concat!(
        "# header\n\n   \n\t\n",
        "1 1:1 # trailing comment 5:5\n",
        "# 1 1:1\n-1 2:2#tight\n  # indented\n"
    );
    let d = parse(text);
    assert_eq!(d.labels, vec![1.0, -1.0]);
    assert_eq!(d.indices, vec![0, 1]);
    assert_eq!(d.values, vec![1.0, 2.0]);
    // Skipped lines still count: the bad token is on line 9.
    assert_err(&format!("{text}1 a:1\n"), 9, "invalid feature index \"a\"");
}

#[test]
fn label_with_comment_directly_after() {
    let d = parse("3#c\n");
    assert_eq!(d.labels, vec![3.0]);
    assert_eq!(d.indptr, vec![0, 0]);
}

#[test]
fn vertical_tab_and_form_feed_separate_tokens() {
    let d = parse("1\x0b1:1\x0c2:3\x0b\n-1\x0c\x0c3:4\n");
    assert_eq!(d.labels, vec![1.0, -1.0]);
    assert_eq!(d.indices, vec![0, 1, 2]);
    assert_eq!(d.values, vec![1.0, 3.0, 4.0]);
}

#[test]
fn qid_is_ignored() {
    let d = parse("3 qid:1 1:0.5 2:1\n1 qid:12 3:2\n2 qid:-3\n");
    assert_eq!(d.labels, vec![3.0, 1.0, 2.0]);
    assert_eq!(d.indptr, vec![0, 2, 3, 3]);
    assert_eq!(d.indices, vec![0, 1, 2]);
    // Its value is not read, as scikit-learn's reader does not read it.
    let d = parse("1 qid:x 1:1\n2 qid:\n");
    assert_eq!(d.labels, vec![1.0, 2.0]);
    assert_eq!(d.indptr, vec![0, 1, 1]);
    // Only directly after the label.
    assert_err("1 1:1 qid:3\n", 1, "invalid feature index \"qid\"");
}

#[test]
fn rows_without_features() {
    let d = parse("1\n-1 \n2 # nothing\n1 5:1\n");
    assert_eq!(d.labels, vec![1.0, -1.0, 2.0, 1.0]);
    assert_eq!(d.indptr, vec![0, 0, 0, 0, 1]);
    assert_eq!(d.n_features, 5);
}

#[test]
fn leading_plus_and_value_forms() {
    let d = parse("+1 1:+1 2:+0.5 3:-.5 4:5. 5:1E2 6:1e-2 7:+2.5e+1 8:-0\n");
    assert_eq!(d.labels, vec![1.0]);
    assert_eq!(d.values, vec![1.0, 0.5, -0.5, 5.0, 100.0, 0.01, 25.0, -0.0]);
    assert!(d.values[7].is_sign_negative());
}

#[test]
fn explicit_zeros_are_kept() {
    let d = parse("1 1:0 2:0.0 3:1 4:-0\n");
    assert_eq!(d.indices, vec![0, 1, 2, 3]);
    assert_eq!(d.values, vec![0.0, 0.0, 1.0, 0.0]);
    assert_eq!(d.indptr, vec![0, 4]);
}

#[test]
fn empty_inputs() {
    for text in ["", "\n\n", "# only\n# comments", "   \r\n\t"] {
        let d = parse(text);
        assert_eq!(d.n_rows(), 0);
        assert_eq!(d.indptr, vec![0]);
        assert!(d.indices.is_empty() && d.values.is_empty());
        assert_eq!(d.n_features, 0);
        let d = parse_in_chunks(text.as_bytes(), "<bytes>", 7);
        assert!(matches!(d, Ok(ref d) if d.n_rows() == 0 && d.indptr == vec![0]));
    }
}

#[test]
fn large_indices() {
    let d = parse("1 2147483647:1\n");
    assert_eq!(d.indices, vec![i32::MAX as i64 - 1]);
    assert_eq!(d.n_features, i32::MAX as usize);
    let d = parse("1 5:2 1000000000000:1\n");
    assert_eq!(d.indices, vec![4, 999_999_999_999]);
    assert_eq!(d.n_features, 1_000_000_000_000);
    assert_err(
        "1 9223372036854775808:1\n",
        1,
        "feature index 9223372036854775808 too large",
    );
    assert_err(
        "1 1:1\n1 99999999999999999999999999:1\n",
        2,
        "feature index 99999999999999999999999999 too large",
    );
}

#[test]
fn error_missing_colon() {
    assert_err("1 1:1\n1 3.5\n", 2, "missing ':' in \"3.5\"");
    assert_err("1 1:1 2\n", 1, "missing ':' in \"2\"");
}

#[test]
fn error_index_zero_or_negative() {
    assert_err("1 0:1\n", 1, "feature index must be >= 1, got 0");
    assert_err("1 1:1\n\n1 -2:1\n", 3, "feature index must be >= 1, got -2");
}

#[test]
fn error_invalid_index() {
    assert_err("1 a:1\n", 1, "invalid feature index \"a\"");
    assert_err("1 :1\n", 1, "invalid feature index \"\"");
    assert_err("1 1.5:1\n", 1, "invalid feature index \"1.5\"");
    assert_err("1 +3:1\n", 1, "invalid feature index \"+3\"");
}

#[test]
fn error_indices_not_increasing() {
    assert_err(
        "1 1:1 7:1 5:1\n",
        1,
        "feature indices must be strictly increasing (5 after 7)",
    );
    assert_err(
        "1 1:1\n1 2:1 2:3\n",
        2,
        "feature indices must be strictly increasing (2 after 2)",
    );
}

#[test]
fn error_invalid_value() {
    assert_err("1 3:abc\n", 1, "invalid feature value \"abc\" for index 3");
    assert_err("1 3:\n", 1, "invalid feature value \"\" for index 3");
    assert_err("1 3: 4:1\n", 1, "invalid feature value \"\" for index 3");
    assert_err("1 3:1:2\n", 1, "invalid feature value \"1:2\" for index 3");
    assert_err("1 3:1e\n", 1, "invalid feature value \"1e\" for index 3");
    assert_err(
        "1 3:0x10\n",
        1,
        "invalid feature value \"0x10\" for index 3",
    );
    assert_err("1 3:1,5\n", 1, "invalid feature value \"1,5\" for index 3");
    let (_, m) = parse_err(&format!("1 3:{}\n", "z".repeat(100)));
    assert!(m.contains("...") && m.len() < 120, "{m}");
}

#[test]
fn error_value_not_finite() {
    assert_err(
        "1 3:nan\n",
        1,
        "feature value for index 3 is not finite (nan)",
    );
    assert_err(
        "1 1:1\n1 3:-inf\n",
        2,
        "feature value for index 3 is not finite (-inf)",
    );
    assert_err(
        "1 4:Infinity\n",
        1,
        "feature value for index 4 is not finite (Infinity)",
    );
    // Overflow to infinity counts as well.
    assert_err(
        "1 4:1e999\n",
        1,
        "feature value for index 4 is not finite (1e999)",
    );
}

#[test]
fn error_labels() {
    assert_err("x 1:1\n", 1, "invalid label \"x\"");
    assert_err("1 1:1\n1,2 1:1\n", 2, "invalid label \"1,2\"");
    assert_err("1:1 2:2\n", 1, "invalid label \"1:1\"");
    assert_err("nan 1:1\n", 1, "label is not finite");
    assert_err("1\n-inf\n", 2, "label is not finite");
    assert_err("1\n1e400\n", 2, "label is not finite");
}

#[test]
fn error_display_has_source_and_line() {
    let e = parse_libsvm(b"1 1:1\n1 0:1\n", "data/x.svm");
    let text = match e {
        Err(e) => e.to_string(),
        Ok(_) => panic!("expected an error"),
    };
    assert_eq!(
        text,
        "data/x.svm, line 2: feature index must be >= 1, got 0"
    );
}

#[test]
fn non_utf8_token_is_reported() {
    let (line, m) = match parse_libsvm(b"1 1:1\n1 2:\xff\xfe\n", "<bytes>") {
        Err(SvmError::Parse { line, message, .. }) => (line, message),
        other => panic!("expected a parse error, got {other:?}"),
    };
    assert_eq!(line, 2);
    assert!(
        m.contains("invalid feature value") && m.contains("index 2"),
        "{m}"
    );
}

/// Random text with a mix of rows, blank lines, comments and CRLF endings.
fn random_text(rng: &mut Rng, rows: usize) -> String {
    let mut s = String::new();
    for _ in 0..rows {
        match rng.below(20) {
            0 => s.push('\n'),
            1 => s.push_str("# a comment 1:2\n"),
            _ => {
                s.push_str(&format!("{}", rng.below(5) as i64 - 2));
                let mut idx = 0;
                for _ in 0..rng.below(12) {
                    idx += 1 + rng.below(30);
                    s.push_str(&format!(" {}:{}", idx, rng.unit() * 4.0 - 2.0));
                }
                s.push_str(if rng.below(4) == 0 { "\r\n" } else { "\n" });
            }
        }
    }
    s
}

#[test]
fn chunked_parse_equals_single_chunk() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let text = random_text(&mut rng, 3000);
    let single = match parse_in_chunks(text.as_bytes(), "<bytes>", 1) {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    };
    assert!(single.n_rows() > 2000);
    for n_chunks in [2, 3, 7, 16, 64, 999, 5000, 100_000] {
        match parse_in_chunks(text.as_bytes(), "<bytes>", n_chunks) {
            Ok(d) => assert_same(&d, &single),
            Err(e) => panic!("{n_chunks} chunks: {e}"),
        }
    }
    assert_same(&parse(&text), &single);
}

#[test]
fn chunk_bounds_cut_after_newlines() {
    let text = b"1 1:1\n22 2:2\n333\n\n4444 4:4";
    for n in 1..40 {
        let b = chunk_bounds(text, n);
        assert_eq!(b.first(), Some(&0));
        assert_eq!(b.last(), Some(&text.len()));
        for w in b.windows(2) {
            assert!(w[0] < w[1]);
            if w[0] > 0 {
                assert_eq!(text[w[0] - 1], b'\n');
            }
        }
    }
    // A single long line cannot be cut.
    assert_eq!(chunk_bounds(b"1 1:1 2:2 3:3", 8), vec![0, 13]);
}

#[test]
fn first_error_in_file_order_across_chunks() {
    let mut rng = Rng(42);
    let mut lines: Vec<String> = random_text(&mut rng, 2000)
        .lines()
        .map(str::to_string)
        .collect();
    lines[1500] = "1 5:1 3:1".to_string();
    lines[700] = "1 4:nan".to_string();
    lines[1900] = "bad".to_string();
    let text = lines.join("\n");
    for n_chunks in [1, 2, 5, 13, 100, 2000] {
        let (line, message) = match parse_in_chunks(text.as_bytes(), "f", n_chunks) {
            Err(SvmError::Parse { line, message, .. }) => (line, message),
            other => panic!("expected a parse error, got {other:?}"),
        };
        assert_eq!(line, 701, "{n_chunks} chunks");
        assert!(message.contains("not finite"), "{message}");
    }
}

/// Random finite doubles over many magnitudes, including values that need 17 digits,
/// subnormals and signed zeros.
fn random_value(rng: &mut Rng) -> f64 {
    match rng.below(8) {
        0 => (rng.below(2001) as f64 - 1000.0) / 8.0,
        1 => rng.unit(),
        2 => -0.0,
        3 => (rng.unit() - 0.5) * 10f64.powi(rng.below(60) as i32 - 30),
        4 => {
            let bits = rng.next();
            let v = f64::from_bits(bits);
            if v.is_finite() {
                v
            } else {
                1.5
            }
        }
        5 => f64::from_bits(rng.below(1 << 52)),
        6 => rng.below(1 << 60) as f64,
        _ => rng.unit() * 1e22,
    }
}

#[test]
fn random_round_trip_exact() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let rows = 2000;
    let mut labels = Vec::new();
    let mut indptr = vec![0i64];
    let mut indices = Vec::new();
    let mut values = Vec::new();
    for _ in 0..rows {
        labels.push(random_value(&mut rng));
        let mut idx = 0i64;
        for _ in 0..rng.below(15) {
            idx += 1 + rng.below(1000) as i64;
            indices.push(idx - 1);
            values.push(random_value(&mut rng));
        }
        indptr.push(indices.len() as i64);
    }
    let expected = LibsvmData {
        n_features: indices.iter().map(|&i| i as usize + 1).max().unwrap_or(0),
        labels,
        indptr,
        indices,
        values,
    };
    for scientific in [false, true] {
        let mut text = String::new();
        for r in 0..rows {
            let fmt = |v: f64| {
                if scientific {
                    format!("{v:e}")
                } else {
                    format!("{v}")
                }
            };
            text.push_str(&fmt(expected.labels[r]));
            for k in expected.indptr[r] as usize..expected.indptr[r + 1] as usize {
                text.push_str(&format!(
                    " {}:{}",
                    expected.indices[k] + 1,
                    fmt(expected.values[k])
                ));
            }
            text.push('\n');
        }
        assert_same(&parse(&text), &expected);
        match parse_in_chunks(text.as_bytes(), "<bytes>", 9) {
            Ok(d) => assert_same(&d, &expected),
            Err(e) => panic!("{e}"),
        }
    }
}

/// The fast path must agree bit for bit with `str::parse` wherever it answers, and the
/// combined parser must accept exactly what `str::parse` accepts.
#[test]
fn fast_float_matches_std_parser() {
    let mut rng = Rng(7);
    let mut cases: Vec<String> = [
        "0",
        "-0",
        "+0",
        "0.0",
        "-0.0",
        "1",
        "+1",
        "-1",
        ".5",
        "5.",
        "-.5",
        "+.5",
        ".",
        "-",
        "+",
        "e5",
        "1e",
        "1e+",
        "1e-",
        "1.e5",
        ".e5",
        "1E5",
        "1e-5",
        "1e22",
        "1e23",
        "1e-22",
        "1e-23",
        "9007199254740992",
        "9007199254740993",
        "9007199254740991e1",
        "123456789012345678901234567890",
        "0.000000000000000000000000000001",
        "0.1",
        "0.2",
        "0.3",
        "2.2250738585072014e-308",
        "4.9e-324",
        "1.7976931348623157e308",
        "1e308",
        "1e309",
        "inf",
        "-inf",
        "nan",
        "NaN",
        "infinity",
        "0x10",
        "1_0",
        "1e5.5",
        "00000000000000000000000000001",
        "1.0000000000000000000000000000",
        "--1",
        "+-1",
        "1e0000000000000000000000000",
        "0e99999999",
        "1e-99999999",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for _ in 0..20_000 {
        let mut s = String::new();
        match rng.below(3) {
            0 => s.push('-'),
            1 => s.push('+'),
            _ => {}
        }
        for _ in 0..rng.below(20) {
            s.push((b'0' + rng.below(10) as u8) as char);
        }
        if rng.below(2) == 0 {
            s.push('.');
            for _ in 0..rng.below(20) {
                s.push((b'0' + rng.below(10) as u8) as char);
            }
        }
        if rng.below(2) == 0 {
            s.push(if rng.below(2) == 0 { 'e' } else { 'E' });
            match rng.below(3) {
                0 => s.push('-'),
                1 => s.push('+'),
                _ => {}
            }
            s.push_str(&rng.below(40).to_string());
        }
        cases.push(s);
    }
    for case in &cases {
        let std = case.parse::<f64>().ok();
        // Also with a delimiter after the token, as in real lines.
        for suffix in ["", " ", "\n", "#", "\t"] {
            let text = format!("{case}{suffix}");
            if let Some((v, end)) = fast_float(text.as_bytes(), 0) {
                assert_eq!(end, case.len(), "{case:?}");
                assert_eq!(std.map(f64::to_bits), Some(v.to_bits()), "{case:?}");
            }
            let (v, end) = parse_float(text.as_bytes(), 0);
            assert_eq!(end, case.len(), "{case:?}");
            assert_eq!(v.map(f64::to_bits), std.map(f64::to_bits), "{case:?}");
        }
    }
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "budgetsvm_libsvm_test_{}_{}",
        std::process::id(),
        name
    ))
}

fn write_file(path: &Path, bytes: &[u8]) {
    if let Err(e) = std::fs::write(path, bytes) {
        panic!("cannot write {}: {e}", path.display());
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).expect("gzip write");
    enc.finish().expect("gzip finish")
}

fn bzip2(data: &[u8]) -> Vec<u8> {
    let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
    enc.write_all(data).expect("bzip2 write");
    enc.finish().expect("bzip2 finish")
}

fn xz(data: &[u8]) -> Vec<u8> {
    let mut enc = liblzma::write::XzEncoder::new(Vec::new(), 6);
    enc.write_all(data).expect("xz write");
    enc.finish().expect("xz finish")
}

fn read_file_ok(path: &Path) -> LibsvmData {
    match read_libsvm_file(path) {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn compressed_files_match_plain() {
    let mut rng = Rng(99);
    let text = random_text(&mut rng, 5000);
    let expected = parse(&text);
    let plain = temp_path("plain.txt");
    write_file(&plain, text.as_bytes());
    assert_same(&read_file_ok(&plain), &expected);
    // Extensions are deliberately misleading: detection goes by content.
    let cases = [
        ("gz.bz2", gzip(text.as_bytes())),
        ("bz2.txt", bzip2(text.as_bytes())),
        ("xz.gz", xz(text.as_bytes())),
        // Concatenated members/streams decode as one text, like the command-line tools.
        (
            "multi.gz",
            [gzip(&text.as_bytes()[..100]), gzip(&text.as_bytes()[100..])].concat(),
        ),
        (
            "multi.xz",
            [xz(&text.as_bytes()[..100]), xz(&text.as_bytes()[100..])].concat(),
        ),
    ];
    for (name, bytes) in &cases {
        let path = temp_path(name);
        write_file(&path, bytes);
        assert_same(&read_file_ok(&path), &expected);
        match read_decompressed(&path) {
            Ok(raw) => assert_eq!(raw, text.as_bytes(), "{name}"),
            Err(e) => panic!("{name}: {e}"),
        }
        let mut streamed = Vec::new();
        match open_decompressed(&path) {
            Ok(mut r) => {
                r.read_to_end(&mut streamed).expect("stream read");
            }
            Err(e) => panic!("{name}: {e}"),
        }
        assert_eq!(streamed, text.as_bytes(), "{name}");
        let _ = std::fs::remove_file(&path);
    }
    let _ = std::fs::remove_file(&plain);
}

#[test]
fn tiny_and_empty_files() {
    for (name, bytes) in [
        ("empty", &b""[..]),
        ("one", &b"1"[..]),
        ("two", &b"1\n"[..]),
    ] {
        let path = temp_path(name);
        write_file(&path, bytes);
        let d = read_file_ok(&path);
        assert_eq!(d.n_rows(), usize::from(!bytes.is_empty()));
        let _ = std::fs::remove_file(&path);
    }
}

fn expect_io_error(path: &Path, needle: &str) {
    match read_libsvm_file(path) {
        Err(SvmError::Io { context, source }) => {
            assert_eq!(context, format!("cannot read {}", path.display()));
            let text = source.to_string();
            assert!(text.contains(needle), "{text:?} should contain {needle:?}");
        }
        other => panic!("expected an Io error, got {other:?}"),
    }
}

#[test]
fn broken_compressed_files_are_io_errors() {
    let text = random_text(&mut Rng(5), 3000);
    let xz_bytes = xz(text.as_bytes());
    let gz_bytes = gzip(text.as_bytes());
    let bz_bytes = bzip2(text.as_bytes());
    let mut corrupt_xz = xz_bytes.clone();
    let mid = corrupt_xz.len() / 2;
    corrupt_xz[mid] ^= 0x55;
    let mut corrupt_gz = gz_bytes.clone();
    let mid = corrupt_gz.len() / 2;
    corrupt_gz[mid] ^= 0x55;
    let mut corrupt_bz = bz_bytes.clone();
    let mid = corrupt_bz.len() / 2;
    corrupt_bz[mid] ^= 0x55;
    let cases: [(&str, &[u8], &str); 9] = [
        (
            "trunc.xz",
            &xz_bytes[..xz_bytes.len() / 2],
            "not a valid xz stream",
        ),
        (
            "trunc_tail.xz",
            &xz_bytes[..xz_bytes.len() - 3],
            "not a valid xz stream",
        ),
        ("corrupt.xz", &corrupt_xz, "not a valid xz stream"),
        (
            "header.xz",
            &[0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 1, 2, 3],
            "not a valid xz stream",
        ),
        (
            "trunc.gz",
            &gz_bytes[..gz_bytes.len() / 2],
            "not a valid gzip stream",
        ),
        ("corrupt.gz", &corrupt_gz, "not a valid gzip stream"),
        (
            "trunc.bz2",
            &bz_bytes[..bz_bytes.len() / 2],
            "not a valid bzip2 stream",
        ),
        ("corrupt.bz2", &corrupt_bz, "not a valid bzip2 stream"),
        ("header.bz2", b"BZh9garbage", "not a valid bzip2 stream"),
    ];
    for (name, bytes, needle) in cases {
        let path = temp_path(name);
        write_file(&path, bytes);
        expect_io_error(&path, needle);
        // The streaming reader reports the same failure from `read`.
        match open_decompressed(&path) {
            Ok(mut r) => {
                let mut sink = Vec::new();
                match r.read_to_end(&mut sink) {
                    Err(e) => assert!(e.to_string().contains(needle), "{name}: {e}"),
                    Ok(_) => panic!("{name}: expected a read error"),
                }
            }
            Err(e) => panic!("{name}: {e}"),
        }
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn chunks_concatenate_to_the_whole_file_for_every_format() {
    let mut rng = Rng(99);
    let text = random_text(&mut rng, 500);
    let text = format!("# header comment\n\n{text}\n# trailing\n");
    let whole = parse(&text);
    for (name, bytes) in [
        ("plain", text.as_bytes().to_vec()),
        ("gz", gzip(text.as_bytes())),
        ("bz2", bzip2(text.as_bytes())),
        ("xz", xz(text.as_bytes())),
    ] {
        let path = temp_path(&format!("chunks.{name}"));
        write_file(&path, &bytes);
        for chunk_lines in [1, 7, 64, 10_000] {
            let mut reader = LibsvmChunks::open(&path, chunk_lines).unwrap();
            let (mut labels, mut indices, mut values) = (vec![], vec![], vec![]);
            let mut indptr = vec![0i64];
            let mut n_features = 0;
            while let Some(c) = reader.next_chunk().unwrap() {
                assert!(c.n_rows() <= chunk_lines);
                let base = *indptr.last().unwrap();
                indptr.extend(c.indptr[1..].iter().map(|p| p + base));
                labels.extend(c.labels);
                indices.extend(c.indices);
                values.extend(c.values);
                n_features = n_features.max(c.n_features);
            }
            let joined = LibsvmData {
                labels,
                indptr,
                indices,
                values,
                n_features,
            };
            assert_same(&joined, &whole);
        }
        let summary = summarize_libsvm_file(&path, 50).unwrap();
        assert_eq!(summary.n_rows, whole.n_rows());
        assert_eq!(summary.n_features, whole.n_features);
        let mut labels = whole.labels.clone();
        labels.sort_by(f64::total_cmp);
        labels.dedup();
        assert_eq!(summary.labels, labels);
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn chunk_errors_carry_the_line_of_the_whole_file() {
    let mut text = String::new();
    for i in 0..40 {
        text.push_str(&format!("1 1:{i}\n"));
    }
    text.push_str("1 2:3 1:4\n");
    let path = temp_path("chunk_err.svm");
    write_file(&path, text.as_bytes());
    let mut reader = LibsvmChunks::open(&path, 6).unwrap();
    let err = loop {
        match reader.next_chunk() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("no error"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, SvmError::Parse { line: 41, .. }), "{err}");
    assert!(LibsvmChunks::open(&path, 0).is_err());
    let _ = std::fs::remove_file(&path);
}

#[test]
fn missing_file_is_io_error() {
    let path = temp_path("does_not_exist");
    match read_libsvm_file(&path) {
        Err(SvmError::Io { context, source }) => {
            assert!(context.contains("does_not_exist"));
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("expected an Io error, got {other:?}"),
    }
    assert!(matches!(open_decompressed(&path), Err(SvmError::Io { .. })));
    assert!(matches!(read_decompressed(&path), Err(SvmError::Io { .. })));
}

#[test]
fn parse_errors_in_files_name_the_path() {
    let path = temp_path("bad.xz");
    write_file(&path, &xz(b"1 1:1\n1 2:x\n"));
    match read_libsvm_file(&path) {
        Err(SvmError::Parse {
            source_name, line, ..
        }) => {
            assert_eq!(source_name, path.display().to_string());
            assert_eq!(line, 2);
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
    let _ = std::fs::remove_file(&path);
}
