# The check both profile stages start with, as a script snippet: `pgo-engine verify` accepts
# the profile directory (its file is the one its manifest names, its key is this build's: Rust
# release, rustc and cargo, target, codegen settings; for BOLT, it fits this build's PGO binary by
# content), or the stage fails naming the refresh command. The directory is the pinned one, or
# the fresh training's where none is pinned (nix/lib/build-chain.nix): both are verified alike. Needs the
# stage prologue's `fail`.
{
  toolchain,
  # "llvm" or "bolt".
  kind,
  # The profile directory (profile file and manifest.json) as a store path.
  profile,
  versions,
  # JSON file of the key's codegen settings (nix/lib/build-chain.nix, `codegenKey`).
  codegenKey,
  # The engine (bin/pgo-engine).
  engine,
  refreshCommand,
  # BOLT: shell words naming llvm-bolt's report of reading the profile into the PGO binary and
  # that binary's symbol table (nix/stages/bolt-profile.nix writes both first).
  boltReport ? null,
  boltSymbols ? null,
}:
''
  ${engine}/bin/pgo-engine verify \
    --kind ${kind} \
    --dir ${profile} \
    --versions ${versions}/versions.json \
    --codegen ${codegenKey} \
    ${if boltReport == null then "" else "--bolt-report ${boltReport} --bolt-symbols ${boltSymbols}"} \
    --refresh-command ${builtins.toJSON refreshCommand} \
    || fail "the ${kind} profile was refused (see above)"
''
