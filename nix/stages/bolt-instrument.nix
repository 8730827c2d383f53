# Stage 5: BOLT instrumentation of the PGO build. The runtime library is passed explicitly by
# absolute path: a distro llvm-bolt that finds none (or another version's) by PATH must fail here.
{
  toolchain,
  # Stage name (gateway-bolt-instrumented).
  name,
  # The binary's name: bin/BINARY, and the profile it writes, BINARY.fdata.
  binary,
  # Output of the PGO stage (bin/BINARY with relocations).
  pgo,
  versions,
}:
toolchain.runStage {
  inherit name;
  script = ''
    [ -s ${versions}/versions.json ] || fail "no toolchain versions"
    runtime=${toolchain.tools.boltRuntimeLib}
    [ -f "$runtime" ] || fail "BOLT runtime library $runtime not found"
    # The runtime is linked into the binary: it must be of the binary's architecture (the
    # x86_64 one given for an aarch64 build would fail only after a full rewrite, in BOLT's words).
    machine() { ${toolchain.tools.readelf} -h "$1" | sed -n 's/^ *Machine: *//p' | head -n1; }
    runtime_machine=$(machine "$runtime")
    binary_machine=$(machine ${pgo}/bin/${binary})
    [ -n "$binary_machine" ] || fail "cannot read the ELF machine of ${pgo}/bin/${binary}"
    [ "$runtime_machine" = "$binary_machine" ] \
      || fail "BOLT runtime library $runtime is for '$runtime_machine', but the binary is for '$binary_machine': give the runtime of the target's architecture"
    # BOLT bakes the fdata path into the binary. A relative one is opened in the working
    # directory of the process at exit, which the training sets to the profile directory it
    # chose: nothing here depends on this sandbox's build directory, so the binary trains
    # anywhere (another sandbox-build-dir, no sandbox, substituted from a cache).
    mkdir -p "$out/bin"
    ${toolchain.tools.llvmBolt} ${pgo}/bin/${binary} -o "$out/bin/${binary}" \
      -instrument \
      -runtime-instrumentation-lib="$runtime" \
      -instrumentation-file=${binary}.fdata \
      -instrumentation-file-append-pid \
      || fail "llvm-bolt -instrument failed"
  '';
}
