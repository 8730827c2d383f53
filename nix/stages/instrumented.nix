# Stage 1: the crate built with `-Cprofile-generate`. With `--target` set by the provider the flag
# reaches only the crate's code and its dependencies, never build scripts or proc macros. Where the
# profile goes is chosen at run time by LLVM_PROFILE_FILE, which the training run sets.
#
# Linked without fat LTO: LLVM instruments each crate before any link-time optimization, so the
# counters, names and control-flow hashes are those the fat-LTO PGO build looks up (measured on the
# gateway: the profile trained on this build gives the PGO build 0 hash mismatches and 0 functions
# without profile data). It saves little (about 4% of this stage's CPU; nix/README.md, "Chain
# cost") and is kept because it is not slower. Overridden in RUSTFLAGS, not in the cargo profile:
# cargo's profile settings go into every crate's `-C metadata`, so into every symbol name the
# profile records.
{
  toolchain,
  # Stage name (gateway-instrumented).
  name,
  # The build arguments every build of the chain shares (nix/lib/build-chain.nix, `crate`:
  # package, binary, features, src, vendor); the PGO build must get the same.
  crate,
  # Link with fat LTO as the optimized builds do (bench/chain-cost measures the difference).
  fatLto ? false,
}:
toolchain.buildPackage (crate // {
  pname = name;
  rustflags = "-Cprofile-generate" + (if fatLto then "" else " -Clto=off -Clinker-plugin-lto=no");
})
