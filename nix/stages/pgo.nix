# Stage 4: the crate rebuilt with the LLVM profile, linked with `--emit-relocs` so BOLT can
# rewrite it. LLVM reports, for the package's own crate and its path crates (the gateway's patched
# crates of third_party/; cargo caps the lints of registry crates, which silences theirs), every
# function whose control-flow hash no longer matches its profile record ("hash mismatch") and,
# asked to with -pgo-warn-missing-function, every function the profile does not know. The engine's
# `use-diagnostics` fails the stage, naming the refresh command, when a function the
# profile has counts for changed (a stale profile); a changed function training never ran (a cold
# edit) is optimized without a profile as before, and a new function is left to the LLVM training
# check, which fails when training runs it. A build that lost its relocations is rejected here,
# not discovered by BOLT.
{
  toolchain,
  # Stage name (gateway-pgo); the build inside it is NAME-build.
  name,
  # The build arguments every build of the chain shares (nix/lib/build-chain.nix, `crate`): those
  # of the instrumented build the profile was trained on.
  crate,
  # Output of the LLVM profile stage (BINARY.profdata, BINARY.proftext, manifest.json).
  profile,
  # The engine (bin/pgo-engine).
  engine,
  # Linker flag that keeps relocations.
  emitRelocs,
  # The command that refreshes the pinned profiles, named when they are stale.
  refreshCommand,
}:
let
  inherit (crate) package binary;
  build = toolchain.buildPackage (crate // {
    pname = "${name}-build";
    rustflags = "-Cprofile-use=${profile}/${binary}.profdata -Cllvm-args=-pgo-warn-missing-function ${emitRelocs}";
    pgoDiagnostics = true;
  });
  nm = toolchain.tools.llvmNm;
  objcopy = toolchain.tools.llvmObjcopy;
  # The longest symbol name left as it is (BOLT's runtime aborted on names of 1,000 and more on
  # aarch64 and wrote 846; half of that leaves room).
  maxSymbolLength = 512;
in
toolchain.runStage {
  inherit name;
  script = ''
    diagnostics=${build}/share/${package}/pgo-diagnostics.txt
    [ -f "$diagnostics" ] || fail "the PGO build kept no profile-use diagnostics"
    ${engine}/bin/pgo-engine use-diagnostics \
      --profile ${profile}/${binary}.proftext \
      --diagnostics "$diagnostics" \
      --refresh-command ${builtins.toJSON refreshCommand} \
      || fail "LLVM's profile-use diagnostics of the ${package} crate and its path crates refuse the profile (see above)"
    ${toolchain.tools.readelf} -S -W ${build}/bin/${binary} > sections.txt \
      || fail "cannot read the ELF sections of the PGO build"
    grep -q ' \.rela\.text ' sections.txt \
      || fail "the PGO build has no .rela.text: --emit-relocs did not reach the linker"
    mkdir -p "$out/bin" "$out/share/${binary}"
    # BOLT's instrumentation runtime writes each function name into a fixed buffer at exit and
    # aborts on a long one ("function name too large": seen on aarch64, where a redis parser
    # future's drop glue is instrumented; the same names are in the x86_64 binary). Symbols over
    # ${toString maxSymbolLength} characters are renamed, deterministically, to a digest of the name, in the binary
    # both BOLT stages start from; the old and new names ship in share/${binary}/renamed-symbols.txt.
    ${nm} -j --defined-only ${build}/bin/${binary} > symbols.txt \
      || fail "cannot list the symbols of the PGO build"
    awk 'length($0) > ${toString maxSymbolLength}' symbols.txt | LC_ALL=C sort -u > long-symbols.txt
    while read -r name; do
      printf '%s _bolt_long_%s\n' "$name" "$(printf %s "$name" | sha256sum | cut -c1-16)"
    done < long-symbols.txt > "$out/share/${binary}/renamed-symbols.txt"
    ${objcopy} --redefine-syms="$out/share/${binary}/renamed-symbols.txt" ${build}/bin/${binary} "$out/bin/${binary}" \
      || fail "llvm-objcopy could not rename the long symbols of the PGO build"
    ${nm} -j --defined-only "$out/bin/${binary}" | awk 'length($0) > ${toString maxSymbolLength} { found = 1 } END { exit !found }' \
      && fail "symbols over ${toString maxSymbolLength} characters remain in the PGO build after renaming"
    echo "stage $stage: $(wc -l < "$out/share/${binary}/renamed-symbols.txt") symbols over ${toString maxSymbolLength} characters renamed"
    cp ${profile}/manifest.json "$out/share/${binary}/pgo-manifest.json"
  '';
}
