# Stage 8: the released artifact. llvm-bolt lays out the PGO build with the BOLT profile using the
# layout flags BOLT's documentation recommends; the output must carry BOLT's note, and the proof
# marker is written last, only after every check passed. For a pinned profile it depends on the
# training check that vouches for it, so a stale pinned profile fails the artifact even though the
# PGO and BOLT stages never wait for a training run; a profile trained in this build (none pinned
# for this key) needs no check, and the marker says so, with the reason (`pgo-engine verify-proof
# --require-pinned`, the release check, refuses it). Where the chain has a training gate (the
# gateway's coverage gate) it depends on it, so a training set the gate refuses fails it too, and
# the gate's report ships beside the marker (share/gateway/request-paths.json).
{
  toolchain,
  # Stage name (gateway-pgo-bolt).
  name,
  # The binary's name: bin/BINARY, its profiles BINARY.*, the marker share/BINARY/proof.json.
  binary,
  # Output of the PGO stage.
  pgo,
  # Output of the pinned LLVM profile stage (BINARY.profdata, BINARY.proftext, manifest.json).
  profile,
  # Output of the pinned BOLT profile stage (BINARY.fdata, manifest.json).
  boltProfile,
  # Outputs of the training checks (verdict.json each), or null for a profile trained in this
  # build, with the reason in llvmTrainedInBuild / boltTrainedInBuild.
  llvmCheck,
  boltCheck,
  llvmTrainedInBuild ? null,
  boltTrainedInBuild ? null,
  # The command that pins profiles, recorded in the marker.
  refreshCommand,
  # The chain's training gate { stage, report, what } (nix/lib/build-chain.nix, `trainingGate`):
  # its report file ships beside the proof marker; null: none.
  gate ? null,
  # The engine (bin/pgo-engine).
  engine,
  versions,
  # The Cargo package the binary is of.
  package,
  # The Cargo source the marker's source digest covers, and what under it (none: all of it).
  src,
  sourceInclude ? [ ],
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
  inherit name;
  script = ''
    mkdir -p "$out/bin" "$out/share/${binary}"
    # BOLT records its command line in .note.bolt_info. Run it on local copies by relative names
    # so that the note names no store path: the artifact's runtime closure stays the artifact.
    cd "$TMPDIR"
    cp ${pgo}/bin/${binary} ${binary}.pgo
    cp ${boltProfile}/${binary}.fdata ${binary}.fdata
    ln -s ${toolchain.tools.llvmBolt} llvm-bolt
    ./llvm-bolt ${binary}.pgo -o ${binary} \
      -data=${binary}.fdata \
      -reorder-blocks=ext-tsp \
      -reorder-functions=cdsort \
      -split-functions \
      -split-all-cold \
      -split-eh \
      -dyno-stats \
      2>&1 | tee "$out/share/${binary}/bolt.log" \
      || fail "llvm-bolt optimization failed"
    cp ${binary} "$out/bin/${binary}"
    ${toolchain.tools.readelf} -S -W "$out/bin/${binary}" | grep -q '\.note\.bolt_info' \
      || fail "the output has no .note.bolt_info section: BOLT did not rewrite it"
    ${engine}/bin/pgo-engine proof \
      --package ${package} \
      --binary ${binary} \
      --llvm-profile ${profile} \
      --bolt-profile ${boltProfile} \
      ${origin "llvm" llvmCheck llvmTrainedInBuild} \
      ${origin "bolt" boltCheck boltTrainedInBuild} \
      --refresh-command ${builtins.toJSON refreshCommand} \
      --bolt-log "$out/share/${binary}/bolt.log" \
      --versions ${versions}/versions.json \
      --source ${src} \
      ${builtins.concatStringsSep " " (map (p: "--source-include ${p}") sourceInclude)} \
      --out "$out/share/${binary}/proof.json" \
      || fail "pgo-engine proof refused to write the marker"
    ${engine}/bin/pgo-engine verify-proof "$out/share/${binary}/proof.json" \
      || fail "the proof marker does not verify"
  '' + (if gate == null then "" else ''
    cp ${gate.stage}/${gate.report} "$out/share/${binary}/${gate.report}" \
      || fail "${gate.what} left no report"
  '');
}
