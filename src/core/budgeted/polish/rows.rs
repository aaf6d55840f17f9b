//! The training rows as the polish reads them: a source visited in the same blocks on every
//! pass, rows in memory or a LIBSVM file read again in chunks.

use crate::core::common::error::{Result, SvmError};
use crate::core::data::libsvm::LibsvmChunks;
use crate::core::data::rows::{AnyRows, CsrView, Rows};

/// Training rows visited as consecutive blocks, the same blocks in the same order on every
/// pass (rows in memory, or a file read again in chunks).
pub trait RowSource {
    fn n_rows(&self) -> usize;
    fn n_cols(&self) -> usize;
    /// Calls `visit(first_row, rows)` for every block.
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()>;
    /// The rows are held in memory already (a copy of some of them adds at most their size).
    fn in_memory(&self) -> bool {
        false
    }
}

/// Rows in memory: one block.
pub struct InMemory<'a>(pub AnyRows<'a>);

impl RowSource for InMemory<'_> {
    fn n_rows(&self) -> usize {
        self.0.n_rows()
    }
    fn n_cols(&self) -> usize {
        self.0.n_cols()
    }
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()> {
        visit(0, &self.0)
    }
    fn in_memory(&self) -> bool {
        true
    }
}

/// A LIBSVM file read again in chunks of `chunk_rows` lines on every pass (`fit_file`): memory
/// is one chunk, whatever the file's size. Its rows are `width` features wide. With `keep`
/// (`open_pair`: one-vs-one's pair of classes) the passes visit the kept rows only, each
/// chunk's kept rows copied (one chunk at most).
pub struct LibsvmFileRows {
    path: std::path::PathBuf,
    chunk_rows: usize,
    width: usize,
    /// Rows visited: the file's, or those kept.
    n_rows: usize,
    /// Rows of the file.
    file_rows: usize,
    /// Per row of the file, whether the passes visit it (None: all).
    keep: Option<Vec<bool>>,
}

impl LibsvmFileRows {
    /// The file's class index per row (labels looked up in the sorted `classes`, -0 as 0),
    /// read in one pass, and the source for the polish's passes.
    pub fn open(
        path: &std::path::Path,
        chunk_rows: usize,
        width: usize,
        classes: &[f64],
    ) -> Result<(Self, Vec<u32>)> {
        Self::open_with(path, chunk_rows, width, |labels, y| {
            for &label in labels {
                let label = label + 0.0;
                let k = classes
                    .binary_search_by(|c| c.total_cmp(&label))
                    .map_err(|_| {
                        SvmError::invalid_input(format!(
                            "{} has the label {label}, which is not one of the model's classes",
                            path.display()
                        ))
                    })?;
                y.push(k as u32);
            }
            Ok(())
        })
    }

    /// The rows of two of the file's classes, `pair` = (a, b) (indices into the sorted
    /// `classes`, a != b; a binary polish of one-vs-one's pair): their targets, 0 for class a
    /// and 1 for b, in the file's order, read in one pass (every label must be one of
    /// `classes`), and the source whose passes visit those rows only.
    pub fn open_pair(
        path: &std::path::Path,
        chunk_rows: usize,
        width: usize,
        classes: &[f64],
        pair: (u32, u32),
    ) -> Result<(Self, Vec<u32>)> {
        let (a, b) = pair;
        let n_classes = classes.len();
        if a == b || a as usize >= n_classes || b as usize >= n_classes {
            return Err(SvmError::invalid_input(format!(
                "pair ({a}, {b}) must be two distinct class indices below {n_classes}"
            )));
        }
        let (mut source, y) = Self::open(path, chunk_rows, width, classes)?;
        let keep: Vec<bool> = y.iter().map(|&k| k == a || k == b).collect();
        let targets: Vec<u32> = y
            .iter()
            .filter(|&&k| k == a || k == b)
            .map(|&k| u32::from(k == b))
            .collect();
        source.n_rows = targets.len();
        source.keep = Some(keep);
        Ok((source, targets))
    }

    /// The file's labels as real targets (regression; each must be finite), read in one pass,
    /// and the source for the polish's passes.
    pub fn open_values(
        path: &std::path::Path,
        chunk_rows: usize,
        width: usize,
    ) -> Result<(Self, Vec<f64>)> {
        Self::open_with(path, chunk_rows, width, |labels, y| {
            if let Some(bad) = labels.iter().find(|v| !v.is_finite()) {
                return Err(SvmError::invalid_input(format!(
                    "{} has the target {bad}; targets must be finite",
                    path.display()
                )));
            }
            y.extend_from_slice(labels);
            Ok(())
        })
    }

    /// One pass over the file that hands each chunk's labels to `targets` (which checks them
    /// and appends them to the targets as it reads them), and the source.
    fn open_with<T>(
        path: &std::path::Path,
        chunk_rows: usize,
        width: usize,
        mut targets: impl FnMut(&[f64], &mut Vec<T>) -> Result<()>,
    ) -> Result<(Self, Vec<T>)> {
        let mut chunks = LibsvmChunks::open(path, chunk_rows)?;
        let mut y = Vec::new();
        while let Some(data) = chunks.next_chunk()? {
            if data.n_features > width {
                return Err(SvmError::invalid_input(format!(
                    "{} has features beyond index {width}",
                    path.display()
                )));
            }
            targets(&data.labels, &mut y)?;
        }
        let source = LibsvmFileRows {
            path: path.to_path_buf(),
            chunk_rows,
            width,
            n_rows: y.len(),
            file_rows: y.len(),
            keep: None,
        };
        Ok((source, y))
    }
}

impl RowSource for LibsvmFileRows {
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    fn n_cols(&self) -> usize {
        self.width
    }
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()> {
        let mut chunks = LibsvmChunks::open(&self.path, self.chunk_rows)?;
        // Rows visited so far, and rows of the file read so far.
        let mut first = 0;
        let mut read = 0;
        // The kept rows of a chunk (with `keep`), reused.
        let (mut indptr, mut indices, mut values) = (Vec::new(), Vec::new(), Vec::new());
        while let Some(data) = chunks.next_chunk()? {
            let n = data.n_rows();
            if data.n_features > self.width || read + n > self.file_rows {
                return Err(SvmError::invalid_input(format!(
                    "{} changed while it was being read",
                    self.path.display()
                )));
            }
            let kept = self.keep.as_ref().map(|keep| &keep[read..read + n]);
            read += n;
            match kept {
                Some(kept) if !kept.iter().all(|&k| k) => {
                    indptr.clear();
                    indices.clear();
                    values.clear();
                    indptr.push(0i64);
                    for (i, _) in kept.iter().enumerate().filter(|(_, &k)| k) {
                        let span = data.indptr[i] as usize..data.indptr[i + 1] as usize;
                        indices.extend_from_slice(&data.indices[span.clone()]);
                        values.extend_from_slice(&data.values[span]);
                        indptr.push(indices.len() as i64);
                    }
                    let rows = indptr.len() - 1;
                    if rows == 0 {
                        continue;
                    }
                    let view = CsrView::new(&indptr, &indices, &values, self.width)?;
                    visit(first, &AnyRows::Csr64(view))?;
                    first += rows;
                }
                _ => {
                    let view = CsrView::new(&data.indptr, &data.indices, &data.values, self.width)?;
                    visit(first, &AnyRows::Csr64(view))?;
                    first += n;
                }
            }
        }
        if read != self.file_rows || first != self.n_rows {
            return Err(SvmError::invalid_input(format!(
                "{} changed while it was being read",
                self.path.display()
            )));
        }
        Ok(())
    }
}
