# Stage 3: merge the training run's profraws into one profdata with the llvm-profdata whose LLVM
# major the toolchain check matched to rustc's. Counts are summed across shapes (a union of
# hotness). Empty or corrupt input fails the merge.
{
  toolchain,
  # Output of the LLVM training stage: *.profraw and manifest.json.
  training,
  versions,
}:
toolchain.runStage {
  name = "gateway-profile";
  script = ''
    [ -s ${versions}/versions.json ] || fail "no toolchain versions"
    shopt -s nullglob
    profraws=(${training}/*.profraw)
    [ ''${#profraws[@]} -gt 0 ] || fail "no .profraw in ${training}: the training run produced no profile"
    mkdir -p "$out"
    ${toolchain.tools.llvmProfdata} merge --failure-mode=all \
      -o "$out/gateway.profdata" "''${profraws[@]}" \
      || fail "llvm-profdata merge rejected the training profiles"
    [ -s "$out/gateway.profdata" ] || fail "merged profdata is empty"
    ${toolchain.tools.llvmProfdata} show "$out/gateway.profdata" > "$out/summary.txt" \
      || fail "llvm-profdata cannot read back the merged profile"
    grep -q '^Total functions: [1-9]' "$out/summary.txt" \
      || fail "merged profile has no functions: $(cat "$out/summary.txt")"
    cp ${training}/manifest.json "$out/manifest.json"
    cp ${versions}/versions.json "$out/versions.json"
    cat "$out/summary.txt"
  '';
}
