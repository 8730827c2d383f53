//! The engine of a PGO+BOLT chain, for any crate: what a chain's stages run between the builds
//! (`docs/contracts.md`, "The engine"). It knows nothing of the binary it optimizes beyond the
//! names and paths a stage gives it: no shapes, no requests, no gateway.
//!
//! - `training`: the training contract, a crate's own training command run under measurement,
//!   and the record of what it left;
//! - `pinned`: a profile's key, manifest, verification, freshness check and pin;
//! - `proof`: the proof marker a released artifact carries, written and verified;
//! - `profile`: profiles read as counters and compared, and what llvm-bolt says of one;
//! - `host`: how busy the machine is (a profile trained beside other work is refused);
//! - `digest`, `json_file`: the sha256 of files and trees, and JSON files read and written.
//!
//! The modules are layered (ARCHITECTURE.md, "Code map: the engine"; `tests/layers.rs`).

pub mod digest;
pub mod host;
pub mod json_file;
pub mod pinned;
pub mod profile;
pub mod proof;
pub mod training;
