# ripgrep's chain (README.md here): `rg` of the published ripgrep 15.2.0, built with its own
# manifest and Cargo.lock, trained and held out on the sources of the crates that lock vendors.
# Built by `nix/offline/build examples.ripgrep.pgo-bolt` (nix/offline/default.nix gives `lib` and
# the fetched crate).
{
  # The library on the entry point's provider (nix/lib/default.nix).
  lib,
  # ripgrep's source, checked against the checksum ./Cargo.lock pins (a derivation), its manifest
  # (a path, read at evaluation: its [profile.release] is part of the profile key) and the crates
  # its own Cargo.lock vendors (a directory).
  src,
  cargoToml,
  vendor,
}:
let
  # The corpus is the vendored crates themselves: training searches those whose names start with
  # a to q, the holdout those with r to z.
  corpus = vendor;
in
lib.buildChain {
  name = "rg";
  package = "ripgrep";
  binary = "rg";
  inherit src cargoToml vendor;
  trainingCommand = "bash ${./train.sh} ${corpus}";
  trainingInputs = corpus;
  holdoutCommand = "bash ${./holdout.sh} ${corpus}";
  profiles = ./profiles;
  profilesLocation = "examples/ripgrep/profiles";
  refreshCommand = "nix/offline/refresh-profiles --chain examples.ripgrep";
}
