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
    # BOLT bakes the fdata path into the binary. The build directory of this sandbox is the one
    # the training stage's sandbox gets too, so the path is recorded for the trainer to use.
    profile_dir="$NIX_BUILD_TOP/bolt-profile"
    mkdir -p "$out/bin" "$out/share/gateway"
    echo "$profile_dir" > "$out/share/gateway/profile-dir"
    ${toolchain.tools.llvmBolt} ${pgo}/bin/gateway -o "$out/bin/gateway" \
      -instrument \
      -runtime-instrumentation-lib="$runtime" \
      -instrumentation-file="$profile_dir/gateway.fdata" \
      -instrumentation-file-append-pid \
      || fail "llvm-bolt -instrument failed"
  '';
}
