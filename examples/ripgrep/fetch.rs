// Empty: examples/ripgrep/Cargo.toml needs a target to resolve and vendor ripgrep.
