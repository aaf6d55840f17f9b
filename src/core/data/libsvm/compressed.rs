//! Opening a data file, plain or compressed: the compression is detected from magic bytes
//! (gzip 1f 8b, bzip2 "BZh", xz FD 37 7A 58 5A 00) rather than the extension, because data sets
//! are commonly renamed (a `.txt` that is really xz, a `.bz2` name kept on a file that was
//! decompressed).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::Path;

use crate::core::common::error::{Result, SvmError};

/// Buffer size of the file and decompressor readers: large enough that the per-call overhead of
/// the decoders vanishes, small enough to stay in L2.
const READ_BUF_BYTES: usize = 1 << 18;

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

pub(super) fn io_error(path: &Path, source: io::Error) -> SvmError {
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
