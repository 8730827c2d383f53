# Stage 1: the gateway built with `-Cprofile-generate`. With `--target` set by the provider the
# flag reaches only the gateway's code and its dependencies, never build scripts or proc macros.
# Where the profile goes is chosen at run time by LLVM_PROFILE_FILE, which `trainer train` sets.
#
# Linked without fat LTO: LLVM instruments each crate before any link-time optimization, so the
# counters, names and control-flow hashes are those the fat-LTO PGO build looks up (measured: the
# profile trained on this build gives the PGO build 0 hash mismatches and 0 functions without
# profile data). It saves little (about 4% of this stage's CPU; nix/README.md, "Chain cost") and
# is kept because it is not slower. Overridden in RUSTFLAGS, not in the cargo profile: cargo's
# profile settings go into every crate's `-C metadata`, so into every symbol name the profile
# records.
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
