# Stage 4: the gateway rebuilt with the LLVM profile, linked with `--emit-relocs` so BOLT can
# rewrite it. LLVM reports, for the gateway crate and the patched crates of third_party/ (whose
# lints cargo does not cap), every function whose control-flow hash no longer matches its profile
# record ("hash mismatch") and, asked to with -pgo-warn-missing-function, every function the
# profile does not know. `trainer profile use-diagnostics` fails the stage, naming the refresh
# command, when a function the profile has counts for changed (a stale profile); a changed
# function training never ran (a cold edit) is optimized without a profile as before, and a new
# function is left to the LLVM training check, which fails when training runs it. A build that
# lost its relocations is rejected here, not discovered by BOLT.
{
  toolchain,
  # Output of the LLVM profile stage (gateway.profdata, gateway.proftext, manifest.json).
  profile,
  trainer,
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
    ${trainer}/bin/trainer profile use-diagnostics \
      --profile ${profile}/gateway.proftext \
      --diagnostics "$diagnostics" \
      --refresh-command ${builtins.toJSON refreshCommand} \
      || fail "LLVM's profile-use diagnostics of the gateway and third_party/ crates refuse the profile (see above)"
    ${toolchain.tools.readelf} -S -W ${build}/bin/gateway > sections.txt \
      || fail "cannot read the ELF sections of the PGO build"
    grep -q ' \.rela\.text ' sections.txt \
      || fail "the PGO build has no .rela.text: --emit-relocs did not reach the linker"
    mkdir -p "$out/bin" "$out/share/gateway"
    cp ${build}/bin/gateway "$out/bin/gateway"
    cp ${profile}/manifest.json "$out/share/gateway/pgo-manifest.json"
  '';
}
