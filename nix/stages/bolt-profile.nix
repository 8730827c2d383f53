# Stage 7: the BOLT profile checked against this build's PGO binary before the optimization uses
# it: the pinned one (<profiles>/<target>/rust-<release>/bolt, committed), or where none is pinned
# the fresh training's. It is checked by its content, not by the binary's sha256: llvm-bolt reads
# it into the PGO binary (`-report-stale`, output discarded: about 2 s) and pinned-verify.nix
# refuses it when llvm-bolt finds a profiled function stale (its recorded branches do not fit the
# code) or the binary lacks one (C runtime and builtin functions aside, `BOLT_MAY_MISS` in
# pgo-engine/src/profile/bolt.rs), or when it is corrupt or of another key, naming the refresh command. A
# change that leaves the profiled code alone (a comment, a cold function) needs no refresh. The
# fdata is copied unchanged: it is already canonical (sorted).
{
  toolchain,
  # Stage name (gateway-bolt-profile).
  name,
  # The binary's name: bin/BINARY, and the profile file, BINARY.fdata.
  binary,
  # The profile directory (BINARY.fdata, manifest.json) as a store path.
  profile,
  # Output of the PGO stage: the binary the profile must fit.
  pgo,
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
  script = ''
    cd "$TMPDIR"
    # Its status is read after the verification, which names a corrupt profile as such first.
    bolt_status=0
    ${toolchain.tools.llvmBolt} ${pgo}/bin/${binary} -o ${binary}.probe \
      -data=${profile}/${binary}.fdata -report-stale > bolt-report.txt 2>&1 || bolt_status=$?
    rm -f ${binary}.probe
    ${toolchain.tools.readelf} -s -W ${pgo}/bin/${binary} > symbols.txt \
      || fail "cannot read the symbol table of the PGO build"
  ''
  + import ./pinned-verify.nix {
    inherit toolchain profile versions codegenKey engine refreshCommand;
    kind = "bolt";
    boltReport = "bolt-report.txt";
    boltSymbols = "symbols.txt";
  }
  + ''
    if [ "$bolt_status" -ne 0 ]; then
      cat bolt-report.txt >&2
      fail "llvm-bolt could not read the profile ${profile}/${binary}.fdata into the PGO binary (exit status $bolt_status)"
    fi
    mkdir -p "$out"
    cp ${profile}/${binary}.fdata ${profile}/manifest.json "$out/"
  '';
}
