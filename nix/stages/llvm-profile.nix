# Stage 3: the pinned LLVM profile (profiles/<system>/<provider>/llvm, committed) made ready for the PGO
# build. pinned-verify.nix refuses a profile whose file is not the one its manifest names
# (corrupt), that was trained for another system or with another rustc or LLVM major, naming the
# refresh command; llvm-profdata then turns the text form into the indexed profile rustc reads
# (text -> indexed is deterministic, so this stage rebuilds bit-identically).
{
  toolchain,
  # The pinned directory (gateway.proftext, manifest.json) as a store path, or null when the
  # repository has none for this system.
  pinned,
  versions,
  trainer,
  # The command that refreshes the pinned profiles, named in every failure.
  refreshCommand,
}:
toolchain.runStage {
  name = "gateway-profile";
  # A missing pinned directory fails in the snippet; nothing after it may name the path.
  script =
    import ./pinned-verify.nix {
      inherit toolchain pinned versions trainer refreshCommand;
      kind = "llvm";
      where = "${toolchain.system}/${toolchain.name}/llvm";
    }
    + (if pinned == null then "" else ''
      mkdir -p "$out"
      cp ${pinned}/gateway.proftext ${pinned}/manifest.json "$out/"
      ${toolchain.tools.llvmProfdata} merge --failure-mode=all \
        -o "$out/gateway.profdata" ${pinned}/gateway.proftext \
        || fail "llvm-profdata cannot read the pinned profile ${pinned}/gateway.proftext (corrupt?): rewrite it with \`${refreshCommand}\`"
      ${toolchain.tools.llvmProfdata} show "$out/gateway.profdata" > "$out/summary.txt" \
        || fail "llvm-profdata cannot read back the indexed profile"
      grep -q '^Total functions: [1-9]' "$out/summary.txt" \
        || fail "the pinned profile has no functions: $(cat "$out/summary.txt")"
      cp ${versions}/versions.json "$out/versions.json"
      cat "$out/summary.txt"
    '');
}
