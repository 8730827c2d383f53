# Stage 3: the LLVM profile made ready for the PGO build: the pinned one
# (<profiles>/<target>/rust-<release>/llvm, committed), or where none is pinned the fresh training's
# (nix/lib/build-chain.nix). pinned-verify.nix refuses a profile whose file is not the one its manifest
# names (corrupt) or whose key is not this build's (another Rust release, target or codegen
# settings), naming the refresh command; llvm-profdata then turns the text form into the indexed
# profile rustc reads (text -> indexed is deterministic, so this stage rebuilds bit-identically).
{
  toolchain,
  # Stage name (gateway-profile).
  name,
  # The binary's name: the profile files are BINARY.proftext and BINARY.profdata.
  binary,
  # The profile directory (BINARY.proftext, manifest.json) as a store path.
  profile,
  versions,
  # JSON file of the key's codegen settings.
  codegenKey,
  # The engine (bin/pgo-engine).
  engine,
  # The command that refreshes the pinned profiles, named in every failure.
  refreshCommand,
}:
toolchain.runStage {
  inherit name;
  script =
    import ./pinned-verify.nix {
      inherit toolchain profile versions codegenKey engine refreshCommand;
      kind = "llvm";
    }
    + ''
      mkdir -p "$out"
      cp ${profile}/${binary}.proftext ${profile}/manifest.json "$out/"
      ${toolchain.tools.llvmProfdata} merge --failure-mode=all \
        -o "$out/${binary}.profdata" ${profile}/${binary}.proftext \
        || fail "llvm-profdata cannot read the profile ${profile}/${binary}.proftext (corrupt?): rewrite it with \`${refreshCommand}\`"
      ${toolchain.tools.llvmProfdata} show "$out/${binary}.profdata" > "$out/summary.txt" \
        || fail "llvm-profdata cannot read back the indexed profile"
      grep -q '^Total functions: [1-9]' "$out/summary.txt" \
        || fail "the profile has no functions: $(cat "$out/summary.txt")"
      cp ${versions}/versions.json "$out/versions.json"
      cat "$out/summary.txt"
    '';
}
