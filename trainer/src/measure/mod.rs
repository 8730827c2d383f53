//! Benchmarks and gates over gateway binaries: the A/B bench (`bench`), the wall-clock holdout gate
//! (`holdout`), instructions per request and per streamed event under cachegrind (`instructions`,
//! `stream_instructions`), memory per open stream and per idle connection (`memory`), and the
//! coverage gate with the function coverage of a profile (`coverage`).

pub mod bench;
pub mod coverage;
pub mod holdout;
pub mod instructions;
pub mod memory;
pub mod stream_instructions;
