//! LIBSVM / svmlight text reader: a whole file (`read_libsvm_file`, `parse_libsvm`), a file a
//! bounded number of lines at a time (`LibsvmChunks`), and one pass that keeps only what
//! streaming training needs (`summarize_libsvm_file`).
//!
//! Data sets in this format are routinely tens to hundreds of megabytes, and reading them is often
//! the slowest step of a short training run: the parser (`parse`) allocates nothing per line
//! and runs in parallel; the files are opened plain or compressed by their magic bytes
//! (`compressed`).

use std::io::BufRead;
use std::path::Path;

use crate::core::common::error::{Result, SvmError};

mod compressed;
mod parse;
#[cfg(test)]
mod tests;

use compressed::io_error;
pub use compressed::{open_decompressed, read_decompressed};
pub use parse::{parse_libsvm, LibsvmData};

/// Read a file, plain or compressed; compression detected from the magic bytes (gzip 1f 8b, bzip2
/// "BZh", xz FD 37 7A 58 5A 00), not the extension.
pub fn read_libsvm_file(path: &Path) -> Result<LibsvmData> {
    let text = read_decompressed(path)?;
    parse_libsvm(&text, &path.display().to_string())
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
