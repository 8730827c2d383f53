# The arguments of a provider's `buildPackage` and the cargo arguments they imply, written once for
# both providers (offline.nix runs `cargo build --release --offline <cargoArgs>`, nixpkgs.nix hands
# <cargoArgs> to crane as `cargoExtraArgs`). A provider calls this with its targets, then with the
# stage's arguments, and gets them back with the defaults filled in.
{
  # The triple the chain builds for, and the builder's own (a build `forHost` runs here).
  target,
  hostTarget,
}:
{
  # Derivation name of the build: a stage name such as "gateway-instrumented".
  pname,
  # The Cargo package to build (`-p`).
  package,
  # The binary of `package` the stages take, shipped as bin/<binary>. Default: the package's name
  # (ripgrep's is `rg`).
  binary ? package,
  # RUSTFLAGS of the stage (its PGO flags); the provider adds its linker flags.
  rustflags,
  # Keep LLVM's profile-use warnings of the package's crate in share/<package>/pgo-diagnostics.txt
  # (nix/README.md, provider interface): the PGO stage reads them.
  pgoDiagnostics ? false,
  # Cargo features of `package` (measurement variants such as [ "mimalloc" ]).
  features ? [ ],
  # Build for the builder (the engine, which runs here) instead of the target.
  forHost ? false,
  # The Cargo source (Cargo.toml, Cargo.lock, the package) of another crate than the provider's
  # own; null: the provider's source (the repository's workspace).
  src ? null,
  # The crate sources for `src`'s Cargo.lock: the offline provider's `cargo vendor` directory,
  # crane's `cargoVendorDir`; null: the provider's (offline), or crane's vendoring of Cargo.lock.
  vendor ? null,
}:
let
  featureArgs = if features == [ ] then "" else " --features ${builtins.concatStringsSep "," features}";
  buildTarget = if forHost then hostTarget else target;
in
{
  inherit pname package binary rustflags pgoDiagnostics features forHost src vendor;
  inherit featureArgs buildTarget;
  # The cargo arguments every provider passes after `build`, the same in a package build and in
  # its dependency build (so that cargo's fingerprints match).
  cargoArgs = "--locked --target ${buildTarget} -p ${package}${featureArgs}";
}
