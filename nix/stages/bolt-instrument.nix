# Stage 5: BOLT instrumentation of the PGO build. The runtime library is passed explicitly by
# absolute path: a distro llvm-bolt that finds none (or another version's) by PATH must fail here.
{
  toolchain,
  # Output of the PGO stage (bin/gateway with relocations).
  pgo,
  versions,
}:
toolchain.runStage {
  name = "gateway-bolt-instrumented";
  script = ''
    [ -s ${versions}/versions.json ] || fail "no toolchain versions"
    runtime=${toolchain.tools.boltRuntimeLib}
    [ -f "$runtime" ] || fail "BOLT runtime library $runtime not found"
    # BOLT bakes the fdata path into the binary. A relative one is opened in the working
    # directory of the process at exit, which the trainer sets to the profile directory it
    # chose: nothing here depends on this sandbox's build directory, so the binary trains
    # anywhere (another sandbox-build-dir, no sandbox, substituted from a cache).
    mkdir -p "$out/bin"
    ${toolchain.tools.llvmBolt} ${pgo}/bin/gateway -o "$out/bin/gateway" \
      -instrument \
      -runtime-instrumentation-lib="$runtime" \
      -instrumentation-file=gateway.fdata \
      -instrumentation-file-append-pid \
      || fail "llvm-bolt -instrument failed"
  '';
}
