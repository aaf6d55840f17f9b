//! What every other folder uses: the error type, the seeded RNG, the thread pool, progress
//! reports and Ctrl-C, the memory a computation may take, and the checks of counts and weights a caller gives. Uses nothing else of
//! the crate.

pub mod checks;
pub mod error;
pub mod memory;
pub mod parallel;
pub mod progress;
pub mod rng;
