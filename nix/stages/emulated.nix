# A binary of a target the builder cannot run, made runnable here: `$out/bin/BINARY` is a script
# that `exec`s the toolchain's emulator (qemu-user) on the real binary, so every stage that starts
# it (the training runs of both kinds, the gateway's coverage gate) takes it unchanged.
# Because the script execs, the pid the training holds is the emulator's: SIGTERM reaches the guest
# through it and the guest's exit status is the process's; the environment (LLVM_PROFILE_FILE)
# and the working directory (a BOLT-instrumented binary's relative fdata path) pass through.
#
# The emulator is named explicitly, never found by binfmt_misc: a builder with qemu registered
# there would otherwise run the binary "natively" and one without would not, and the chain must
# behave the same on both. Fails closed before any training: the emulator must be an executable,
# the binary must be of the target's machine, and one run through the wrapper (`smoke`: the
# gateway's `gateway paths`) must exit 0.
{
  toolchain,
  # Stage name (gateway-instrumented-emulated, ...).
  name,
  # The binary's name (bin/BINARY).
  binary,
  # Derivation with bin/BINARY, built for toolchain.target.
  program,
  # The arguments of the one run through the wrapper, and script lines that check its output
  # (in ./smoke.out); it must exit 0 whatever they are.
  smoke ? { args = "--version"; check = ""; },
}:
let
  emulator = toolchain.emulator;
  emulatorBin = builtins.head (builtins.split " " emulator);
  # ELF e_machine of the target, as `od -tx1` prints its two little-endian bytes.
  machines = {
    "aarch64-unknown-linux-gnu" = "b700";
    "x86_64-unknown-linux-gnu" = "3e00";
  };
  machine =
    machines.${toolchain.target}
      or (throw "nix/stages/emulated.nix: no ELF machine known for ${toolchain.target}");
in
if emulator == null then
  throw "nix/stages/emulated.nix: the toolchain for ${toolchain.target} has no emulator"
else
  toolchain.runStage {
    inherit name;
    script = ''
      [ -x ${emulatorBin} ] \
        || fail "no emulator at ${emulatorBin}: the ${toolchain.target} ${binary} cannot run on this builder"
      real=${program}/bin/${binary}
      [ -f "$real" ] || fail "no ${binary} at $real"
      found=$(od -An -tx1 -j18 -N2 "$real" | tr -d ' \n')
      [ "$found" = ${machine} ] \
        || fail "$real is not a ${toolchain.target} binary (ELF machine $found, expected ${machine})"
      mkdir -p "$out/bin"
      printf '#!/bin/sh\nexec %s %s "$@"\n' ${builtins.toJSON emulator} "$real" > "$out/bin/${binary}"
      chmod 755 "$out/bin/${binary}"
      # One run through it, in scratch: an instrumented binary writes its profile at exit.
      mkdir -p "$TMPDIR/smoke" && cd "$TMPDIR/smoke"
      LLVM_PROFILE_FILE="$TMPDIR/smoke/smoke-%p.profraw" "$out/bin/${binary}" ${smoke.args} > smoke.out 2> smoke.log \
        || fail "the ${toolchain.target} ${binary} does not run through ${emulatorBin}: $(tail -n 5 smoke.log)"
      ${smoke.check}
      echo "stage $stage: the ${toolchain.target} ${binary} runs under ${emulatorBin} (${binary} ${smoke.args}: exit 0)"
    '';
  }
