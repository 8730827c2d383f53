# Stage 8: the released artifact. llvm-bolt lays out the PGO build with the pinned BOLT profile
# using the layout flags BOLT's documentation recommends; the output must carry BOLT's note, and
# the proof marker is written last, only after every check passed. It depends on both training
# checks, so a stale pinned profile fails the artifact even though the PGO and BOLT stages never
# wait for a training run, and on the coverage gate, so a training set that leaves a request path
# cold fails it too (its report ships as share/gateway/request-paths.json).
{
  toolchain,
  # Output of the PGO stage.
  pgo,
  # Output of the pinned LLVM profile stage (gateway.profdata, gateway.proftext, manifest.json).
  profile,
  # Output of the pinned BOLT profile stage (gateway.fdata, manifest.json).
  boltProfile,
  # Outputs of the training checks (verdict.json each).
  llvmCheck,
  boltCheck,
  # Output of the coverage gate: its report ships beside the proof marker.
  coverage,
  trainer,
  versions,
}:
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
      --llvm-check ${llvmCheck}/verdict.json \
      --bolt-check ${boltCheck}/verdict.json \
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
