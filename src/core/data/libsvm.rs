//! LIBSVM / svmlight text reader.
//!
//! Data sets in this format are routinely tens to hundreds of megabytes, and reading them is often
//! the slowest step of a short training run, so the parser avoids every per-line and per-token
//! allocation: it scans raw bytes, parses integers inline, and takes a fast path for the plain
//! decimal literals that make up nearly all real files. The buffer is cut at newline boundaries
//! into a few chunks per thread which are parsed in parallel and then stitched together; each
//! chunk counts its own lines, so errors still carry the line number of the whole file.
//!
//! Compression is detected from magic bytes rather than the extension because data sets are
//! commonly renamed (a `.txt` that is really xz, a `.bz2` name kept on a file that was
//! decompressed).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::Path;

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

/// Buffer size of the file and decompressor readers: large enough that the per-call overhead of
/// the decoders vanishes, small enough to stay in L2.
const READ_BUF_BYTES: usize = 1 << 18;

/// Parse in-memory text. `source_name` is used in error messages (a file path or "<bytes>").
pub fn parse_libsvm(text: &[u8], source_name: &str) -> Result<LibsvmData> {
    // A few chunks per thread even out chunks that happen to hold longer lines.
    let n_chunks = (4 * rayon::current_num_threads())
        .min(text.len() / MIN_CHUNK_BYTES)
        .max(1);
    parse_in_chunks(text, source_name, n_chunks)
}

/// Read a file, plain or compressed; compression detected from the magic bytes (gzip 1f 8b, bzip2
/// "BZh", xz FD 37 7A 58 5A 00), not the extension.
pub fn read_libsvm_file(path: &Path) -> Result<LibsvmData> {
    let text = read_decompressed(path)?;
    parse_libsvm(&text, &path.display().to_string())
}

/// Read only the raw (decompressed) bytes.
pub fn read_decompressed(path: &Path) -> Result<Vec<u8>> {
    let (format, source, file_len) = open_sniffed(path)?;
    // The file size is exact for plain files and a lower bound for compressed ones; reserving it
    // saves the first dozen reallocations of `read_to_end`.
    let capacity = match format {
        Format::Plain => file_len,
        _ => file_len.saturating_mul(4),
    };
    let mut out = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
    decoder(format, source)
        .and_then(|mut reader| reader.read_to_end(&mut out))
        .map_err(|source| io_error(path, source))?;
    Ok(out)
}

/// Open a file as a buffered, decompressing reader (for streaming through a file without loading
/// it). Errors of a broken compressed stream surface from the reader's `read` calls and say which
/// format was expected.
pub fn open_decompressed(path: &Path) -> Result<Box<dyn BufRead + Send>> {
    let (format, source, _) = open_sniffed(path)?;
    if format == Format::Plain {
        // The plain source is already buffered; a second buffer would only copy.
        return Ok(Box::new(source));
    }
    let reader = decoder(format, source).map_err(|e| io_error(path, e))?;
    Ok(Box::new(BufReader::with_capacity(READ_BUF_BYTES, reader)))
}

/// Reads a LIBSVM file (plain or compressed) a bounded number of lines at a time, for training
/// on files larger than memory: each chunk goes through the same parser as a whole file (in
/// parallel for large chunks), and parse errors carry the line number within the whole file.
/// Memory is one chunk's text and its parsed rows; the text buffer is reused between chunks.
pub struct LibsvmChunks {
    reader: Box<dyn BufRead + Send>,
    path: std::path::PathBuf,
    source_name: String,
    chunk_lines: usize,
    text: Vec<u8>,
    lines_before: usize,
    done: bool,
}

impl LibsvmChunks {
    /// Opens `path` for reading in chunks of at most `chunk_lines` lines (at least 1).
    pub fn open(path: &Path, chunk_lines: usize) -> Result<Self> {
        if chunk_lines == 0 {
            return Err(SvmError::invalid_parameter(
                "chunk_rows",
                "must be at least 1",
            ));
        }
        Ok(LibsvmChunks {
            reader: open_decompressed(path)?,
            path: path.to_path_buf(),
            source_name: path.display().to_string(),
            chunk_lines,
            text: Vec::new(),
            lines_before: 0,
            done: false,
        })
    }

    /// The rows of the next lines of the file (at most `chunk_lines` lines; blank and comment
    /// lines give no row, and a chunk of nothing but those is skipped); None at the end. Column
    /// indices are 0-based and `n_features` is the largest index of this chunk only.
    pub fn next_chunk(&mut self) -> Result<Option<LibsvmData>> {
        while !self.done {
            self.text.clear();
            let mut lines = 0;
            while lines < self.chunk_lines {
                let got = self
                    .reader
                    .read_until(b'\n', &mut self.text)
                    .map_err(|e| io_error(&self.path, e))?;
                if got == 0 {
                    self.done = true;
                    break;
                }
                lines += 1;
            }
            let data = parse_libsvm(&self.text, &self.source_name).map_err(|e| match e {
                SvmError::Parse {
                    source_name,
                    line,
                    message,
                } => SvmError::Parse {
                    source_name,
                    line: line + self.lines_before,
                    message,
                },
                other => other,
            })?;
            self.lines_before += lines;
            if data.n_rows() > 0 {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }

    /// Lines read so far.
    pub fn lines_read(&self) -> usize {
        self.lines_before
    }
}

/// What one pass over a LIBSVM file finds without keeping its rows: enough to set up streaming
/// training (classes, width, row count, the variance behind gamma = 'scale').
#[derive(Debug, Clone, PartialEq)]
pub struct LibsvmSummary {
    pub n_rows: usize,
    /// Largest 1-based feature index.
    pub n_features: usize,
    /// The distinct labels, sorted.
    pub labels: Vec<f64>,
    /// Rows of each label (for balanced class weights).
    pub label_counts: Vec<u64>,
    /// Sum and sum of squares of the stored values (the zeros not stored add nothing).
    pub value_sum: f64,
    pub value_sq_sum: f64,
}

/// At most this many distinct labels in a file summary: more means regression targets, not
/// classes, and would otherwise grow without bound.
pub const MAX_DISTINCT_LABELS: usize = 100_000;

/// Reads a file once in chunks of `chunk_lines` lines, keeping only a [`LibsvmSummary`].
pub fn summarize_libsvm_file(path: &Path, chunk_lines: usize) -> Result<LibsvmSummary> {
    let mut chunks = LibsvmChunks::open(path, chunk_lines)?;
    let mut summary = LibsvmSummary {
        n_rows: 0,
        n_features: 0,
        labels: Vec::new(),
        label_counts: Vec::new(),
        value_sum: 0.0,
        value_sq_sum: 0.0,
    };
    while let Some(chunk) = chunks.next_chunk()? {
        summary.n_rows += chunk.n_rows();
        summary.n_features = summary.n_features.max(chunk.n_features);
        for &v in &chunk.values {
            summary.value_sum += v;
            summary.value_sq_sum += v * v;
        }
        for &label in &chunk.labels {
            match summary.labels.binary_search_by(|l| l.total_cmp(&label)) {
                Ok(at) => summary.label_counts[at] += 1,
                Err(at) => {
                    if summary.labels.len() >= MAX_DISTINCT_LABELS {
                        return Err(SvmError::invalid_input(format!(
                            "{} has more than {MAX_DISTINCT_LABELS} distinct labels; classification needs class labels",
                            path.display()
                        )));
                    }
                    summary.labels.insert(at, label);
                    summary.label_counts.insert(at, 1);
                }
            }
        }
    }
    Ok(summary)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Plain,
    Gzip,
    Bzip2,
    Xz,
}

impl Format {
    fn sniff(magic: &[u8]) -> Format {
        if magic.starts_with(&[0x1f, 0x8b]) {
            Format::Gzip
        } else if magic.starts_with(b"BZh") {
            Format::Bzip2
        } else if magic.starts_with(&[0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]) {
            Format::Xz
        } else {
            Format::Plain
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Plain => "plain",
            Format::Gzip => "gzip",
            Format::Bzip2 => "bzip2",
            Format::Xz => "xz",
        }
    }
}

/// The file with its first bytes put back in front, so sniffing needs no seek and also works
/// on pipes such as `/dev/stdin`.
type Source = BufReader<io::Chain<Cursor<Vec<u8>>, File>>;

fn io_error(path: &Path, source: io::Error) -> SvmError {
    SvmError::Io {
        context: format!("cannot read {}", path.display()),
        source,
    }
}

fn open_sniffed(path: &Path) -> Result<(Format, Source, u64)> {
    let mut file = File::open(path).map_err(|e| io_error(path, e))?;
    let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut magic = [0u8; 6];
    let mut got = 0;
    // A single `read` may return fewer bytes than asked even before the end of the file.
    while got < magic.len() {
        match file.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(path, e)),
        }
    }
    let head = &magic[..got];
    let source = BufReader::with_capacity(READ_BUF_BYTES, Cursor::new(head.to_vec()).chain(file));
    Ok((Format::sniff(head), source, file_len))
}

/// Wraps the source in the decoder of its format. The xz stream is built here rather than by
/// `XzDecoder::new_multi_decoder`, which panics if liblzma cannot allocate its state.
fn decoder(format: Format, source: Source) -> io::Result<Box<dyn Read + Send>> {
    Ok(match format {
        Format::Plain => Box::new(source),
        Format::Gzip => Box::new(StreamErrors {
            // Multi-member, like `gzip -d`: concatenated .gz files are valid gzip files.
            inner: flate2::bufread::MultiGzDecoder::new(source),
            format,
        }),
        Format::Bzip2 => Box::new(StreamErrors {
            inner: bzip2::bufread::MultiBzDecoder::new(source),
            format,
        }),
        Format::Xz => {
            // CONCATENATED: like `xz -d`, decode every stream of a concatenation.
            let stream = liblzma::stream::Stream::new_stream_decoder(
                u64::MAX,
                liblzma::stream::CONCATENATED,
            )
            .map_err(|e| io::Error::other(format!("cannot start the xz decoder ({e})")))?;
            Box::new(StreamErrors {
                inner: liblzma::bufread::XzDecoder::new_stream(source, stream),
                format,
            })
        }
    })
}

/// Rewrites decoder errors so the message says the file is not a valid compressed stream; the
/// decoders' own texts ("corrupt deflate stream", "Data") do not tell the user which file format
/// was assumed.
struct StreamErrors<R> {
    inner: R,
    format: Format,
}

impl<R: Read> Read for StreamErrors<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner
            .read(buf)
            .map_err(|e| stream_error(self.format, e))
    }
}

fn stream_error(format: Format, e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput | io::ErrorKind::UnexpectedEof => {
            io::Error::new(
                e.kind(),
                format!("not a valid {} stream ({e})", format.name()),
            )
        }
        // Anything else (permission, device errors) comes from the file, not the data.
        _ => e,
    }
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
fn parse_in_chunks(text: &[u8], source_name: &str, n_chunks: usize) -> Result<LibsvmData> {
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
fn chunk_bounds(text: &[u8], n_chunks: usize) -> Vec<usize> {
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
fn parse_float(buf: &[u8], pos: usize) -> (Option<f64>, usize) {
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
fn fast_float(buf: &[u8], mut pos: usize) -> Option<(f64, usize)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
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
}
