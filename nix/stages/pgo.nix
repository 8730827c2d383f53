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
  nm = toolchain.tools.llvmNm;
  objcopy = toolchain.tools.llvmObjcopy;
  # The longest symbol name left as it is (BOLT's runtime aborted on names of 1,000 and more on
  # aarch64 and wrote 846; half of that leaves room).
  maxSymbolLength = 512;
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
    # BOLT's instrumentation runtime writes each function name into a fixed buffer at exit and
    # aborts on a long one ("function name too large": seen on aarch64, where a redis parser
    # future's drop glue is instrumented; the same names are in the x86_64 binary). Symbols over
    # ${toString maxSymbolLength} characters are renamed, deterministically, to a digest of the name, in the binary
    # both BOLT stages start from; the old and new names ship in share/gateway/renamed-symbols.txt.
    ${nm} -j --defined-only ${build}/bin/gateway > symbols.txt \
      || fail "cannot list the symbols of the PGO build"
    awk 'length($0) > ${toString maxSymbolLength}' symbols.txt | LC_ALL=C sort -u > long-symbols.txt
    while read -r name; do
      printf '%s _bolt_long_%s\n' "$name" "$(printf %s "$name" | sha256sum | cut -c1-16)"
    done < long-symbols.txt > "$out/share/gateway/renamed-symbols.txt"
    ${objcopy} --redefine-syms="$out/share/gateway/renamed-symbols.txt" ${build}/bin/gateway "$out/bin/gateway" \
      || fail "llvm-objcopy could not rename the long symbols of the PGO build"
    ${nm} -j --defined-only "$out/bin/gateway" | awk 'length($0) > ${toString maxSymbolLength} { found = 1 } END { exit !found }' \
      && fail "symbols over ${toString maxSymbolLength} characters remain in the PGO build after renaming"
    echo "stage $stage: $(wc -l < "$out/share/gateway/renamed-symbols.txt") symbols over ${toString maxSymbolLength} characters renamed"
    cp ${profile}/manifest.json "$out/share/gateway/pgo-manifest.json"
  '';
}
