# wordfreq's chain: what the chain's library builds for this crate. flake.nix calls it with the
# library of the flake input; the chain's repository builds the same file offline as its twin
# (`nix/offline/build templates.default.pgo-bolt`). The arguments are those of the library's
# buildChain (nix/lib/build-chain.nix in the chain's repository lists every one, with defaults).
{
  # The library (the flake input's `lib.<system>`).
  lib,
  # This crate's Cargo source: Cargo.toml, Cargo.lock, src/.
  src,
  # The command that pins fresh profiles under ./profiles (flake.nix: `nix run .#refresh-profiles`).
  refreshCommand,
  # ./profiles as the repository's root names it.
  profilesLocation ? "profiles",
}:
lib.buildChain {
  inherit src refreshCommand profilesLocation;
  # The manifest is read at evaluation (its [profile.release] is part of the profile key).
  cargoToml = ./Cargo.toml;
  package = "wordfreq";
  # Run under the training contract with the instrumented binary as $PGO_BINARY.
  trainingCommand = "bash ${./train.sh}";
  # Optional: a workload training never ran, counted plain vs PGO vs PGO+BOLT under cachegrind.
  holdoutCommand = "bash ${./holdout.sh}";
  # <target>/rust-<release>/{llvm,bolt}, written by the refresh command; until then every build
  # trains in its sandbox, and the release check refuses the artifact.
  profiles = ./profiles;
}
