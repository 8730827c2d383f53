# The Rust release of every build of the chain, in one place. The pinned profiles are keyed by it
# (profiles/<target>/rust-<release>/, profiles/README.md): the same release gives the same function
# names and control-flow hashes whichever provider invokes cargo, so both read one profile set.
# The flake's provider takes exactly this release from fenix (`fromToolchainName`, the channel
# manifest checked by its sha256), so `nix flake update` cannot move it away from the profiles;
# the offline provider uses the rustup toolchain of this release when the machine has it
# (nix/offline/build). Every provider's `versions` stage fails when rustc reports another release.
# Bumping Rust is one deliberate change: this file, then `nix/offline/refresh-profiles` (or `nix
# run .#refresh-profiles`), committed together.
{
  release = "1.95.0";
  # sha256 of https://static.rust-lang.org/dist/channel-rust-1.95.0.toml (the 2026-04-16 dist:
  # rustc 1.95.0 (59807616e 2026-04-14)), nix-base32.
  manifestSha256 = "0fiibz7lxdgayn5mdjljjlv8pgi9gfcy4al0svgqlkjqr2r5l1w2";
}
