# Stage 4: the gateway rebuilt with the merged profile, linked with `--emit-relocs` so BOLT can
# rewrite it. A build that lost its relocations is rejected here, not discovered by BOLT later.
{
  toolchain,
  # Output of the profile stage (gateway.profdata).
  profile,
  # Linker flag that keeps relocations.
  emitRelocs,
}:
let
  build = toolchain.buildPackage {
    pname = "gateway-pgo-build";
    package = "gateway";
    rustflags = "-Cprofile-use=${profile}/gateway.profdata ${emitRelocs}";
  };
in
toolchain.runStage {
  name = "gateway-pgo";
  script = ''
    ${toolchain.tools.readelf} -S -W ${build}/bin/gateway > sections.txt \
      || fail "cannot read the ELF sections of the PGO build"
    grep -q ' \.rela\.text ' sections.txt \
      || fail "the PGO build has no .rela.text: --emit-relocs did not reach the linker"
    mkdir -p "$out/bin" "$out/share/gateway"
    cp ${build}/bin/gateway "$out/bin/gateway"
    cp ${profile}/manifest.json "$out/share/gateway/pgo-manifest.json"
  '';
}
