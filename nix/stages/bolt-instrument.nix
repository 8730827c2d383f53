# Stage 5: BOLT instrumentation of the PGO build. The runtime library is passed explicitly by
# absolute path: a distro llvm-bolt that finds none (or another version's) by PATH must fail here.
{
  toolchain,
  # Output of the PGO stage (bin/gateway with relocations).
  pgo,
  # Directory baked into the instrumented binary for its fdata (one file per process).
  profileDir,
  versions,
}:
toolchain.runStage {
  name = "gateway-bolt-instrumented";
  script = ''
    [ -s ${versions}/versions.json ] || fail "no toolchain versions"
    runtime=${toolchain.tools.boltRuntimeLib}
    [ -f "$runtime" ] || fail "BOLT runtime library $runtime not found"
    mkdir -p "$out/bin"
    ${toolchain.tools.llvmBolt} ${pgo}/bin/gateway -o "$out/bin/gateway" \
      -instrument \
      -runtime-instrumentation-lib="$runtime" \
      -instrumentation-file=${profileDir}/gateway.fdata \
      -instrumentation-file-append-pid \
      || fail "llvm-bolt -instrument failed"
  '';
}
