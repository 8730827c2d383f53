# Stage 4: the gateway rebuilt with the pinned profile, linked with `--emit-relocs` so BOLT can
# rewrite it. LLVM reports, for the gateway crate and the patched crates of third_party/ (whose
# lints cargo does not cap), every function whose control-flow hash no longer matches its profile
# record ("hash mismatch") and, asked to with
# -pgo-warn-missing-function, every function the profile does not know; a pinned profile trained
# on these sources has none of either, so any is a stale profile and fails the stage, naming the
# refresh command. A build that lost its relocations is rejected here, not discovered by BOLT.
{
  toolchain,
  # Output of the pinned LLVM profile stage (gateway.profdata, manifest.json).
  profile,
  # Linker flag that keeps relocations.
  emitRelocs,
  # The command that refreshes the pinned profiles, named when they are stale.
  refreshCommand,
  # Cargo features of the gateway: those of the instrumented build the profile was trained on.
  features ? [ ],
}:
let
  build = toolchain.buildPackage {
    pname = "gateway-pgo-build";
    package = "gateway";
    rustflags = "-Cprofile-use=${profile}/gateway.profdata -Cllvm-args=-pgo-warn-missing-function ${emitRelocs}";
    pgoDiagnostics = true;
    inherit features;
  };
in
toolchain.runStage {
  name = "gateway-pgo";
  script = ''
    diagnostics=${build}/share/gateway/pgo-diagnostics.txt
    [ -f "$diagnostics" ] || fail "the PGO build kept no profile-use diagnostics"
    mismatched=$(grep -c 'hash mismatch' "$diagnostics" || true)
    unprofiled=$(grep -c 'no profile data available' "$diagnostics" || true)
    echo "stage $stage: LLVM profile-use diagnostics of the gateway and third_party/ crates: $mismatched hash mismatch(es), $unprofiled function(s) without profile data"
    if [ "$mismatched" -gt 0 ] || [ "$unprofiled" -gt 0 ]; then
      head -n 20 "$diagnostics" >&2
      fail "the pinned LLVM profile is stale: LLVM reports $mismatched function(s) of the gateway or third_party/ crates whose control flow changed since training (hash mismatch) and $unprofiled without profile data; refresh it with \`${refreshCommand}\` and commit profiles/"
    fi
    ${toolchain.tools.readelf} -S -W ${build}/bin/gateway > sections.txt \
      || fail "cannot read the ELF sections of the PGO build"
    grep -q ' \.rela\.text ' sections.txt \
      || fail "the PGO build has no .rela.text: --emit-relocs did not reach the linker"
    mkdir -p "$out/bin" "$out/share/gateway"
    cp ${build}/bin/gateway "$out/bin/gateway"
    cp ${profile}/manifest.json "$out/share/gateway/pgo-manifest.json"
  '';
}
