# Stage 1: the gateway built with `-Cprofile-generate`. With `--target` set by the provider the
# flag reaches only the gateway's code and its dependencies, never build scripts or proc macros.
# Where the profile goes is chosen at run time by LLVM_PROFILE_FILE, which `trainer train` sets.
{ toolchain }:
toolchain.buildPackage {
  pname = "gateway-instrumented";
  package = "gateway";
  rustflags = "-Cprofile-generate";
}
