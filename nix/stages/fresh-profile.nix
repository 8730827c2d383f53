# The fresh profiles (gateway-profile-fresh, gateway-bolt-profile-fresh): a training run
# (training-run.nix) kept, with the manifest that keys it (Rust release, rustc, cargo, target,
# codegen settings) and records the sources, Cargo.lock and shapes it was trained from and the
# binary it was trained on. The refresh command copies them into profiles/; where no profile is
# pinned for the build's key, the chain uses them directly (trained in build). Every build of one
# counts a little differently, so these, and an artifact built from them, do not rebuild
# bit-identically. An LLVM profile gets its function coverage beside it (`trainer
# profile-coverage`: the share of the gateway crate's functions reached, and the request-path
# functions no shape reaches), which the refresh command pins with it. Training waits for the
# coverage gate: no profile is trained from a set that leaves a request path cold.
{
  toolchain,
  # Stage name: gateway-profile-fresh or gateway-bolt-profile-fresh.
  name,
  # "llvm" or "bolt".
  kind,
  # Derivation with bin/gateway, instrumented for `kind`.
  gateway,
  trainer,
  shapes,
  versions,
  # JSON file of the key's codegen settings (nix/pipeline.nix).
  codegenKey,
  # Output of the coverage gate (nix/stages/coverage.nix) for `shapes`.
  coverage,
  # BOLT: the PGO stage whose binary `gateway` instruments (the profile belongs to it).
  pgo ? null,
}:
toolchain.runStage {
  inherit name;
  script = ''
    [ -s ${coverage}/request-paths.json ] || fail "the coverage gate left no report"
    ${import ./training-run.nix { inherit toolchain kind gateway trainer shapes; }}
    mkdir -p "$out"
    cp "$fresh/$fresh_file" "$out/$fresh_file"
    cp "$training/manifest.json" "$out/training.json"
    ${trainer}/bin/trainer profile manifest \
      --kind ${kind} \
      --profile "$out/$fresh_file" \
      --training "$training/manifest.json" \
      --versions ${versions}/versions.json \
      --codegen ${codegenKey} \
      --system ${toolchain.system} \
      --provider ${toolchain.name} \
      --source ${toolchain.src} \
      --shapes ${shapes} \
      --instrumented ${gateway}/bin/gateway \
      ${if pgo == null then "" else "--pgo-binary ${pgo}/bin/gateway"} \
      --out "$out/manifest.json" \
      || fail "trainer profile manifest failed"
  '' + (if kind == "llvm" then ''
    ${trainer}/bin/trainer profile-coverage \
      --proftext "$out/gateway.proftext" \
      --json "$out/function-coverage.json" \
      > "$out/function-coverage.txt" \
      || fail "trainer profile-coverage cannot read the fresh profile"
    cat "$out/function-coverage.txt"
  '' else "");
}
