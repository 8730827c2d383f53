# Stage 1: the gateway built with `-Cprofile-generate`. With `--target` set by the provider the
# flag reaches only the gateway's code and its dependencies, never build scripts or proc macros.
# Where the profile goes is chosen at run time by LLVM_PROFILE_FILE, which `trainer train` sets.
#
# Linked without fat LTO: LLVM instruments each crate before any link-time optimization, so the
# counters, names and control-flow hashes are those the fat-LTO PGO build looks up (measured: a
# profile trained on this build gives the PGO build 0 hash mismatches, and a training of it
# overlaps one of the fat-LTO instrumented build by as much as two trainings of one binary do;
# nix/README.md, "Chain cost"), while the instrumented link, the slowest step of this build with
# fat LTO, is skipped. Overridden in RUSTFLAGS, not in the cargo profile: cargo's profile settings
# go into every crate's `-C metadata`, so into every symbol name the profile records.
{
  toolchain,
  # Cargo features of the gateway (an allocator variant); the PGO build must get the same.
  features ? [ ],
  # Link with fat LTO as the optimized builds do (what the chain did before; bench/chain-cost
  # measures the difference).
  fatLto ? false,
}:
toolchain.buildPackage {
  pname = "gateway-instrumented";
  package = "gateway";
  rustflags = "-Cprofile-generate" + (if fatLto then "" else " -Clto=off -Clinker-plugin-lto=no");
  inherit features;
}
