# Stage 8: the released artifact. llvm-bolt lays out the PGO build with the BOLT profile using the
# layout flags BOLT's documentation recommends; the output must carry BOLT's note, and the proof
# marker is written last, only after every check passed. For a pinned profile it depends on the
# training check that vouches for it, so a stale pinned profile fails the artifact even though the
# PGO and BOLT stages never wait for a training run; a profile trained in this build (none pinned
# for this key) needs no check, and the marker says so, with the reason (`trainer verify-proof
# --require-pinned`, the release check, refuses it). It depends on the coverage gate, so a
# training set that leaves a request path cold fails it too (its report ships as
# share/gateway/request-paths.json).
{
  toolchain,
  # Output of the PGO stage.
  pgo,
  # Output of the pinned LLVM profile stage (gateway.profdata, gateway.proftext, manifest.json).
  profile,
  # Output of the pinned BOLT profile stage (gateway.fdata, manifest.json).
  boltProfile,
  # Outputs of the training checks (verdict.json each), or null for a profile trained in this
  # build, with the reason in llvmTrainedInBuild / boltTrainedInBuild.
  llvmCheck,
  boltCheck,
  llvmTrainedInBuild ? null,
  boltTrainedInBuild ? null,
  # The command that pins profiles, recorded in the marker.
  refreshCommand,
  # Output of the coverage gate: its report ships beside the proof marker.
  coverage,
  trainer,
  versions,
}:
let
  # The proof's arguments for where a profile came from.
  origin =
    kind: check: reason:
    if check != null then
      "--${kind}-check ${check}/verdict.json"
    else if reason != null then
      "--${kind}-trained-in-build ${builtins.toJSON reason}"
    else
      throw "nix/stages/bolt-optimize.nix: the ${kind} profile has neither a training check nor a reason it was trained in the build";
in
toolchain.runStage {
  name = "gateway-pgo-bolt";
  script = ''
    mkdir -p "$out/bin" "$out/share/gateway"
    # BOLT records its command line in .note.bolt_info. Run it on local copies by relative names
    # so that the note names no store path: the artifact's runtime closure stays the artifact.
    cd "$TMPDIR"
    cp ${pgo}/bin/gateway gateway.pgo
    cp ${boltProfile}/gateway.fdata gateway.fdata
    ln -s ${toolchain.tools.llvmBolt} llvm-bolt
    ./llvm-bolt gateway.pgo -o gateway \
      -data=gateway.fdata \
      -reorder-blocks=ext-tsp \
      -reorder-functions=cdsort \
      -split-functions \
      -split-all-cold \
      -split-eh \
      -dyno-stats \
      2>&1 | tee "$out/share/gateway/bolt.log" \
      || fail "llvm-bolt optimization failed"
    cp gateway "$out/bin/gateway"
    ${toolchain.tools.readelf} -S -W "$out/bin/gateway" | grep -q '\.note\.bolt_info' \
      || fail "the output has no .note.bolt_info section: BOLT did not rewrite it"
    ${trainer}/bin/trainer proof \
      --llvm-profile ${profile} \
      --bolt-profile ${boltProfile} \
      ${origin "llvm" llvmCheck llvmTrainedInBuild} \
      ${origin "bolt" boltCheck boltTrainedInBuild} \
      --refresh-command ${builtins.toJSON refreshCommand} \
      --bolt-log "$out/share/gateway/bolt.log" \
      --versions ${versions}/versions.json \
      --source ${toolchain.src} \
      --out "$out/share/gateway/proof.json" \
      || fail "trainer proof refused to write the marker"
    ${trainer}/bin/trainer verify-proof "$out/share/gateway/proof.json" \
      || fail "the proof marker does not verify"
    cp ${coverage}/request-paths.json "$out/share/gateway/request-paths.json" \
      || fail "the coverage gate left no report"
  '';
}
