//! How much memory a computation may take before it starts: the machine's available memory
//! (Linux's `MemAvailable`), so that a request that cannot fit is an error before anything is
//! allocated instead of a process killed by the kernel's OOM killer.

use crate::core::common::error::{Result, SvmError};

/// Bytes the system could give this process now without swapping (Linux `/proc/meminfo`
/// `MemAvailable`); None where that is not known.
pub fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Fails with `OutOfMemory` when `need` bytes exceed `available` (when known). `what` says
/// what needs them and what to change, for the message.
pub fn check_fits(need: u128, available: Option<u64>, what: impl FnOnce() -> String) -> Result<()> {
    match available {
        Some(avail) if need > u128::from(avail) => Err(SvmError::OutOfMemory(format!(
            "{} needs about {:.1} GB, but {:.1} GB of memory are available",
            what(),
            need as f64 / 1e9,
            avail as f64 / 1e9
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_beyond_the_available_memory_is_an_error_naming_both() {
        let err = check_fits(3_000_000_000, Some(2_000_000_000), || "the job".into()).unwrap_err();
        assert!(matches!(err, SvmError::OutOfMemory(_)));
        let text = err.to_string();
        assert!(
            text.contains("the job needs about 3.0 GB") && text.contains("2.0 GB"),
            "{text}"
        );
        assert!(check_fits(1_000, Some(2_000), || unreachable!()).is_ok());
        assert!(check_fits(u128::MAX, None, || unreachable!()).is_ok());
    }

    #[test]
    fn available_memory_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(available_bytes().is_some_and(|b| b > 0));
        }
    }
}
