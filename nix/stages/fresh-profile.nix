# The fresh profiles (gateway-profile-fresh, gateway-bolt-profile-fresh): a training run
# (training-run.nix) kept, with the manifest that keys it (Rust release, rustc, cargo, target,
# codegen settings) and records the sources, Cargo.lock and training inputs it was trained from
# and the binary it was trained on. The refresh command copies them into the crate's pinned
# profiles; where no profile is pinned for the build's key, the chain uses them directly (trained
# in build). Every build of one counts a little differently, so these, and an artifact built from
# them, do not rebuild bit-identically. Where the chain has a training gate (the gateway's coverage
# gate), training waits for it: no profile is trained from a set the gate refuses. `reports` adds
# what the chain keeps beside a profile (the gateway: its function coverage, which the refresh
# command pins with it).
{
  toolchain,
  # Stage name: gateway-profile-fresh or gateway-bolt-profile-fresh.
  name,
  # "llvm" or "bolt".
  kind,
  # The binary's name (bin/BINARY).
  binary,
  # Derivation with bin/BINARY, instrumented for `kind` (runnable here).
  instrumented,
  # The training command (training-run.nix).
  command,
  # The directory of training inputs the manifest digests (the gateway's shapes, a corpus), or
  # null.
  inputs ? null,
  # The engine (bin/pgo-engine).
  engine,
  versions,
  # JSON file of the key's codegen settings (nix/lib/build-chain.nix).
  codegenKey,
  # The Cargo source the manifest's source digest covers, and what under it (none: all of it).
  src,
  sourceInclude ? [ ],
  # The chain's training gate { stage, report, what }, or null.
  gate ? null,
  # BOLT: the PGO stage whose binary `instrumented` instruments (the profile belongs to it).
  pgo ? null,
  # Script lines run last, with the profile at "$out/$fresh_file" (the gateway's function
  # coverage).
  reports ? "",
}:
toolchain.runStage {
  inherit name;
  script = (if gate == null then "" else ''
    [ -s ${gate.stage}/${gate.report} ] || fail "${gate.what} left no report"
  '') + ''
    ${import ./training-run.nix { inherit toolchain kind binary instrumented command engine; }}
    mkdir -p "$out"
    cp "$fresh/$fresh_file" "$out/$fresh_file"
    cp "$training/record.json" "$out/training.json"
    ${engine}/bin/pgo-engine manifest \
      --kind ${kind} \
      --profile "$out/$fresh_file" \
      --training "$training/record.json" \
      --versions ${versions}/versions.json \
      --codegen ${codegenKey} \
      --system ${toolchain.system} \
      --provider ${toolchain.name} \
      --source ${src} \
      ${builtins.concatStringsSep " " (map (p: "--source-include ${p}") sourceInclude)} \
      ${if inputs == null then "" else "--workload-inputs ${inputs}"} \
      --instrumented ${instrumented}/bin/${binary} \
      ${if pgo == null then "" else "--pgo-binary ${pgo}/bin/${binary}"} \
      --out "$out/manifest.json" \
      || fail "pgo-engine manifest failed"
  '' + reports;
}
