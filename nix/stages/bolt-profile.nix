# Stage 7: merge the per-process fdata of the BOLT training run into one profile.
{
  toolchain,
  # Output of the BOLT training stage: *.fdata and manifest.json.
  training,
  versions,
}:
toolchain.runStage {
  name = "gateway-bolt-profile";
  script = ''
    [ -s ${versions}/versions.json ] || fail "no toolchain versions"
    shopt -s nullglob
    fdata=(${training}/*.fdata*)
    [ ''${#fdata[@]} -gt 0 ] || fail "no .fdata in ${training}: the BOLT training run produced no profile"
    mkdir -p "$out"
    ${toolchain.tools.mergeFdata} "''${fdata[@]}" -o "$out/gateway.fdata" \
      || fail "merge-fdata failed"
    [ -s "$out/gateway.fdata" ] || fail "merged fdata is empty"
    cp ${training}/manifest.json "$out/manifest.json"
  '';
}
