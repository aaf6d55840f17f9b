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
/// is one chunk, whatever the file's size. Its rows are `width` features wide.
pub struct LibsvmFileRows {
    path: std::path::PathBuf,
    chunk_rows: usize,
    width: usize,
    n_rows: usize,
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
        let mut first = 0;
        while let Some(data) = chunks.next_chunk()? {
            if data.n_features > self.width || first + data.n_rows() > self.n_rows {
                return Err(SvmError::invalid_input(format!(
                    "{} changed while it was being read",
                    self.path.display()
                )));
            }
            let view = CsrView::new(&data.indptr, &data.indices, &data.values, self.width)?;
            visit(first, &AnyRows::Csr64(view))?;
            first += data.n_rows();
        }
        if first != self.n_rows {
            return Err(SvmError::invalid_input(format!(
                "{} changed while it was being read",
                self.path.display()
            )));
        }
        Ok(())
    }
}
