//! The LIBSVM text parser: raw bytes to CSR, without a per-line or per-token allocation (it
//! scans bytes, parses integers inline and takes a fast path for the plain decimal literals
//! that make up nearly all real files). The buffer is cut at newline boundaries into a few
//! chunks per thread, parsed in parallel and then stitched together; each chunk counts its own
//! lines, so errors still carry the line number of the whole text.

use rayon::prelude::*;

use crate::core::common::error::{Result, SvmError};

/// Parsed LIBSVM data as CSR with 0-based column indices.
#[derive(Debug, Clone, PartialEq)]
pub struct LibsvmData {
    pub labels: Vec<f64>,
    /// Row pointers: `n_rows + 1` entries starting at 0, as scipy's `csr_matrix` expects.
    pub indptr: Vec<i64>,
    /// 0-based column index (file index - 1), strictly increasing within a row.
    pub indices: Vec<i64>,
    /// Stored values; explicit zeros in the file are kept, as scikit-learn's reader does, so both
    /// readers give the same matrix structure.
    pub values: Vec<f64>,
    /// Largest 1-based index seen in the file (0 without any feature). Files do not declare their
    /// width, so a test file may come out narrower than its training file; callers reconcile that.
    pub n_features: usize,
}

impl LibsvmData {
    pub fn n_rows(&self) -> usize {
        self.labels.len()
    }
}

/// Largest accepted 1-based feature index: the 0-based column indices are int64 (scipy's CSR
/// takes them, and the solvers cost O(non-zeros) whatever the number of columns, so hashed text
/// features with ids up to 10^12 and beyond are fine); n_features must still fit isize.
const MAX_INDEX: u64 = i64::MAX as u64;

/// Below this many bytes per chunk, spreading the work over threads costs more than it saves.
const MIN_CHUNK_BYTES: usize = 1 << 16;

/// Parse in-memory text. `source_name` is used in error messages (a file path or "<bytes>").
pub fn parse_libsvm(text: &[u8], source_name: &str) -> Result<LibsvmData> {
    // A few chunks per thread even out chunks that happen to hold longer lines.
    let n_chunks = (4 * rayon::current_num_threads())
        .min(text.len() / MIN_CHUNK_BYTES)
        .max(1);
    parse_in_chunks(text, source_name, n_chunks)
}

/// One chunk's rows; `indptr` is local to the chunk (starts at 0).
struct Chunk {
    labels: Vec<f64>,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    values: Vec<f64>,
    /// Largest 1-based index of the chunk.
    max_index: u64,
    /// Lines consumed; for every chunk but the last this is its number of newlines, which gives
    /// the line numbers of the chunks after it.
    lines: usize,
}

/// A parse error with its 1-based line number within the chunk.
struct ChunkError {
    line: usize,
    message: String,
}

/// `parse_libsvm` with a chosen number of chunks, so tests can force chunk boundaries into small
/// inputs.
pub(super) fn parse_in_chunks(
    text: &[u8],
    source_name: &str,
    n_chunks: usize,
) -> Result<LibsvmData> {
    let bounds = chunk_bounds(text, n_chunks);
    let results: Vec<std::result::Result<Chunk, ChunkError>> = if bounds.len() <= 2 {
        vec![parse_chunk(text)]
    } else {
        bounds
            .par_windows(2)
            .map(|w| parse_chunk(&text[w[0]..w[1]]))
            .collect()
    };
    let mut chunks = Vec::with_capacity(results.len());
    let mut lines_before = 0;
    // Chunks are in file order and every chunk before a failed one was read to its end, so the
    // first failure found here is the first error of the file and its line offset is exact.
    for result in results {
        match result {
            Ok(chunk) => {
                lines_before += chunk.lines;
                chunks.push(chunk);
            }
            Err(e) => {
                return Err(SvmError::Parse {
                    source_name: source_name.to_string(),
                    line: lines_before + e.line,
                    message: e.message,
                })
            }
        }
    }
    Ok(concat(chunks))
}

/// Chunk start offsets plus the end of the text; every cut is just after a newline, so no line is
/// split. Lines longer than a chunk merge chunks rather than produce empty ones.
pub(super) fn chunk_bounds(text: &[u8], n_chunks: usize) -> Vec<usize> {
    let n_chunks = n_chunks.max(1);
    let len = text.len();
    let mut bounds = Vec::with_capacity(n_chunks + 1);
    bounds.push(0);
    for k in 1..n_chunks {
        // u128: `len * k` must not overflow for any buffer size.
        let target = (len as u128 * k as u128 / n_chunks as u128) as usize;
        let last = bounds.last().copied().unwrap_or(0);
        if target <= last {
            continue;
        }
        match text[target..].iter().position(|&b| b == b'\n') {
            Some(i) if target + i + 1 < len => bounds.push(target + i + 1),
            _ => break,
        }
    }
    bounds.push(len);
    bounds
}

fn concat(mut chunks: Vec<Chunk>) -> LibsvmData {
    let n_features = chunks.iter().map(|c| c.max_index).max().unwrap_or(0) as usize;
    if chunks.len() <= 1 {
        // The common small-file case: hand over the vectors without copying.
        return match chunks.pop() {
            Some(c) => LibsvmData {
                labels: c.labels,
                indptr: c.indptr,
                indices: c.indices,
                values: c.values,
                n_features,
            },
            None => LibsvmData {
                labels: Vec::new(),
                indptr: vec![0],
                indices: Vec::new(),
                values: Vec::new(),
                n_features,
            },
        };
    }
    let n_rows: usize = chunks.iter().map(|c| c.labels.len()).sum();
    let nnz: usize = chunks.iter().map(|c| c.indices.len()).sum();
    // Zeroed vectors come from calloc, so filling them costs no extra pass over memory.
    let mut labels = vec![0.0; n_rows];
    let mut indptr = vec![0i64; n_rows + 1];
    let mut indices = vec![0i64; nnz];
    let mut values = vec![0.0; nnz];
    {
        let mut parts = Vec::with_capacity(chunks.len());
        let mut rest_labels = &mut labels[..];
        let mut rest_indptr = &mut indptr[1..];
        let mut rest_indices = &mut indices[..];
        let mut rest_values = &mut values[..];
        let mut nnz_before = 0i64;
        for c in &chunks {
            let (rows, z) = (c.labels.len(), c.indices.len());
            let (l, rl) = std::mem::take(&mut rest_labels).split_at_mut(rows);
            let (p, rp) = std::mem::take(&mut rest_indptr).split_at_mut(rows);
            let (i, ri) = std::mem::take(&mut rest_indices).split_at_mut(z);
            let (v, rv) = std::mem::take(&mut rest_values).split_at_mut(z);
            (rest_labels, rest_indptr, rest_indices, rest_values) = (rl, rp, ri, rv);
            parts.push((c, l, p, i, v, nnz_before));
            nnz_before += z as i64;
        }
        parts.into_par_iter().for_each(|(c, l, p, i, v, offset)| {
            l.copy_from_slice(&c.labels);
            for (dst, &end) in p.iter_mut().zip(&c.indptr[1..]) {
                *dst = end + offset;
            }
            i.copy_from_slice(&c.indices);
            v.copy_from_slice(&c.values);
        });
    }
    LibsvmData {
        labels,
        indptr,
        indices,
        values,
        n_features,
    }
}

fn parse_chunk(buf: &[u8]) -> std::result::Result<Chunk, ChunkError> {
    // Rough guesses (about 8 bytes per entry, 100 per row) that spare most regrowths of typical
    // files without reserving much more than the text itself.
    let mut chunk = Chunk {
        labels: Vec::with_capacity(buf.len() / 128),
        indptr: Vec::with_capacity(buf.len() / 128 + 1),
        indices: Vec::with_capacity(buf.len() / 8),
        values: Vec::with_capacity(buf.len() / 8),
        max_index: 0,
        lines: 0,
    };
    chunk.indptr.push(0);
    let mut pos = 0;
    let mut line = 0;
    while pos < buf.len() {
        line += 1;
        pos = parse_line(buf, pos, &mut chunk).map_err(|message| ChunkError { line, message })?;
    }
    chunk.lines = line;
    Ok(chunk)
}

/// Separators: ASCII whitespace other than the newline, as Python's `bytes.split` (and so
/// scikit-learn's reader) sees it; `\r` among them, so CRLF files need no special case.
#[inline(always)]
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | 0x0b | 0x0c)
}

/// Bytes that end a token: separators, the end of the line, and the start of a comment.
#[inline(always)]
fn is_delim(b: u8) -> bool {
    is_space(b) || matches!(b, b'\n' | b'#')
}

#[inline(always)]
fn skip_space(buf: &[u8], mut pos: usize) -> usize {
    while pos < buf.len() && is_space(buf[pos]) {
        pos += 1;
    }
    pos
}

#[inline]
fn token_end(buf: &[u8], mut pos: usize) -> usize {
    while pos < buf.len() && !is_delim(buf[pos]) {
        pos += 1;
    }
    pos
}

/// Position just after the next newline, or the end of the buffer.
#[inline]
fn next_line(buf: &[u8], pos: usize) -> usize {
    match buf[pos..].iter().position(|&b| b == b'\n') {
        Some(i) => pos + i + 1,
        None => buf.len(),
    }
}

/// Parses the line starting at `pos` into `out` (nothing for blank and comment-only lines) and
/// returns where the next line starts. On error, `out` may hold a partial row; the chunk is
/// discarded then anyway.
fn parse_line(buf: &[u8], pos: usize, out: &mut Chunk) -> std::result::Result<usize, String> {
    let n = buf.len();
    let mut pos = skip_space(buf, pos);
    if pos >= n {
        return Ok(n);
    }
    match buf[pos] {
        b'\n' => return Ok(pos + 1),
        b'#' => return Ok(next_line(buf, pos)),
        _ => {}
    }

    let (label, end) = parse_float(buf, pos);
    let label = match label {
        Some(v) if v.is_finite() => v,
        Some(_) => return Err(format!("label is not finite ({})", show(&buf[pos..end]))),
        None => return Err(invalid_label(&buf[pos..end])),
    };
    pos = skip_space(buf, end);

    // svmlight ranking files put the query id right after the label; it plays no part here, so
    // its value is not read (as scikit-learn's reader does without query_id).
    if buf[pos..].starts_with(b"qid:") {
        pos = token_end(buf, pos);
    }

    let mut prev: u64 = 0;
    let next = loop {
        pos = skip_space(buf, pos);
        if pos >= n {
            break n;
        }
        match buf[pos] {
            b'\n' => break pos + 1,
            b'#' => break next_line(buf, pos),
            _ => {}
        }

        let start = pos;
        let mut index: u64 = 0;
        while pos < n {
            let d = buf[pos].wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            // Saturating keeps arbitrarily long digit runs from overflowing; anything this large
            // is rejected below.
            index = index.saturating_mul(10).saturating_add(u64::from(d));
            pos += 1;
        }
        if pos == start || pos >= n || buf[pos] != b':' {
            return Err(bad_pair(&buf[start..token_end(buf, start)]));
        }
        if index == 0 {
            return Err("feature index must be >= 1, got 0".to_string());
        }
        if index > MAX_INDEX {
            return Err(format!(
                "feature index {} too large (at most {MAX_INDEX})",
                String::from_utf8_lossy(clip(&buf[start..pos]))
            ));
        }
        if index <= prev {
            return Err(format!(
                "feature indices must be strictly increasing ({index} after {prev})"
            ));
        }
        pos += 1;

        let (value, end) = parse_float(buf, pos);
        let value = match value {
            Some(v) if v.is_finite() => v,
            Some(_) => {
                return Err(format!(
                    "feature value for index {index} is not finite ({})",
                    String::from_utf8_lossy(clip(&buf[pos..end]))
                ))
            }
            None => {
                return Err(format!(
                    "invalid feature value {} for index {index}",
                    show(&buf[pos..end])
                ))
            }
        };
        out.indices.push((index - 1) as i64);
        out.values.push(value);
        prev = index;
        pos = end;
    };
    out.labels.push(label);
    out.indptr.push(out.indices.len() as i64);
    out.max_index = out.max_index.max(prev);
    Ok(next)
}

/// Optional sign, then at least one digit.
fn is_integer(s: &[u8]) -> bool {
    let digits = match s.first() {
        Some(b'+' | b'-') => &s[1..],
        _ => s,
    };
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

fn invalid_label(token: &[u8]) -> String {
    if token.contains(&b':') {
        format!(
            "invalid label {} (each line must start with its label)",
            show(token)
        )
    } else if token.contains(&b',') {
        format!(
            "invalid label {} (multi-label lines are not supported)",
            show(token)
        )
    } else {
        format!("invalid label {}", show(token))
    }
}

/// Explains an `index:value` token whose index part did not scan as digits followed by ':'.
fn bad_pair(token: &[u8]) -> String {
    match token.iter().position(|&b| b == b':') {
        None => format!("missing ':' in {}", show(token)),
        Some(colon) => {
            let index = &token[..colon];
            if index.first() == Some(&b'-') && is_integer(index) {
                format!(
                    "feature index must be >= 1, got {}",
                    String::from_utf8_lossy(clip(index))
                )
            } else {
                format!("invalid feature index {}", show(index))
            }
        }
    }
}

/// Keeps messages readable when the offending token is a megabyte of garbage.
fn clip(token: &[u8]) -> &[u8] {
    &token[..token.len().min(40)]
}

/// A token quoted and escaped for an error message.
fn show(token: &[u8]) -> String {
    let text = String::from_utf8_lossy(clip(token));
    if token.len() > 40 {
        format!("{text:?}...")
    } else {
        format!("{text:?}")
    }
}

/// Parses the float token at `pos`; returns the value (None if it is not a float literal) and
/// the end of the token. Accepts what Rust's `f64` parser accepts, including a leading '+',
/// "inf" and "nan" (which callers reject with a clearer message than "invalid").
#[inline]
pub(super) fn parse_float(buf: &[u8], pos: usize) -> (Option<f64>, usize) {
    if let Some((v, end)) = fast_float(buf, pos) {
        return (Some(v), end);
    }
    let end = token_end(buf, pos);
    let value = std::str::from_utf8(&buf[pos..end])
        .ok()
        .and_then(|s| s.parse::<f64>().ok());
    (value, end)
}

/// Powers of ten that are exact in f64.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Clinger's fast path: a decimal `m * 10^e` with `m <= 2^53` and `|e| <= 22` is one IEEE
/// multiplication or division of two exactly representable numbers, hence correctly rounded and
/// bit-identical to Rust's (and Python's) parser. That covers almost every token of real files
/// and skips UTF-8 validation and the general algorithm. Anything else (more digits, larger
/// exponents, "inf", malformed text) returns None and goes to `str::parse`.
#[inline(always)]
pub(super) fn fast_float(buf: &[u8], mut pos: usize) -> Option<(f64, usize)> {
    const MAX_MANTISSA: u64 = 1 << 53;
    let n = buf.len();
    let negative = skip_sign(buf, &mut pos);
    let mut mantissa: u64 = 0;
    let int_start = pos;
    pos = read_digits(buf, pos, &mut mantissa, MAX_MANTISSA)?;
    let mut digits = pos - int_start;
    let mut frac_digits = 0usize;
    if pos < n && buf[pos] == b'.' {
        pos += 1;
        let frac_start = pos;
        pos = read_digits(buf, pos, &mut mantissa, MAX_MANTISSA)?;
        frac_digits = pos - frac_start;
        digits += frac_digits;
    }
    if digits == 0 {
        return None;
    }
    let mut exponent: i64 = 0;
    if pos < n && buf[pos] | 0x20 == b'e' {
        pos += 1;
        let exp_negative = skip_sign(buf, &mut pos);
        let exp_start = pos;
        let mut abs_exponent = 0u64;
        pos = read_digits(buf, pos, &mut abs_exponent, 100_000)?;
        if pos == exp_start {
            return None;
        }
        // At most 10^6 + 9: the cast is exact.
        exponent = abs_exponent as i64;
        if exp_negative {
            exponent = -exponent;
        }
    }
    if pos < n && !is_delim(buf[pos]) {
        return None;
    }
    let e10 = exponent - frac_digits as i64;
    let magnitude = if mantissa == 0 {
        0.0
    } else if mantissa > MAX_MANTISSA || !(-22..=22).contains(&e10) {
        return None;
    } else if e10 >= 0 {
        mantissa as f64 * POW10[e10 as usize]
    } else {
        mantissa as f64 / POW10[(-e10) as usize]
    };
    Some((if negative { -magnitude } else { magnitude }, pos))
}

/// Steps over a '+' or '-' at `pos`; returns whether it was '-'.
#[inline(always)]
fn skip_sign(buf: &[u8], pos: &mut usize) -> bool {
    match buf.get(*pos) {
        Some(b'-') => {
            *pos += 1;
            true
        }
        Some(b'+') => {
            *pos += 1;
            false
        }
        _ => false,
    }
}

/// Appends the decimal digits from `pos` on to `value`; returns where they end, or None when
/// another digit comes once `value` is past `cap` (more than the fast path can take).
#[inline(always)]
fn read_digits(buf: &[u8], mut pos: usize, value: &mut u64, cap: u64) -> Option<usize> {
    while pos < buf.len() {
        let d = buf[pos].wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        if *value > cap {
            return None;
        }
        *value = *value * 10 + u64::from(d);
        pos += 1;
    }
    Some(pos)
}
