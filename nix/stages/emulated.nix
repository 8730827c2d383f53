# A gateway of a target the builder cannot run, made runnable by the trainer: `$out/bin/gateway`
# is a script that `exec`s the toolchain's emulator (qemu-user) on the real binary, so every stage
# that starts a gateway (the coverage gate, the training runs of both kinds) takes it unchanged.
# Because the script execs, the pid the trainer holds is the emulator's: SIGTERM reaches the guest
# through it and the guest's exit status is the process's; the environment (LLVM_PROFILE_FILE)
# and the working directory (a BOLT-instrumented binary's relative fdata path) pass through.
#
# The emulator is named explicitly, never found by binfmt_misc: a builder with qemu registered
# there would otherwise run the binary "natively" and one without would not, and the chain must
# behave the same on both. Fails closed before any training: the emulator must be an executable,
# the binary must be of the target's machine, and one run through the wrapper (`gateway paths`)
# must exit 0.
{
  toolchain,
  # Stage name (gateway-instrumented-emulated, ...).
  name,
  # Derivation with bin/gateway, built for toolchain.target.
  gateway,
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
        || fail "no emulator at ${emulatorBin}: the ${toolchain.target} gateway cannot run on this builder"
      real=${gateway}/bin/gateway
      [ -f "$real" ] || fail "no gateway at $real"
      found=$(od -An -tx1 -j18 -N2 "$real" | tr -d ' \n')
      [ "$found" = ${machine} ] \
        || fail "$real is not a ${toolchain.target} binary (ELF machine $found, expected ${machine})"
      mkdir -p "$out/bin"
      printf '#!/bin/sh\nexec %s %s "$@"\n' ${builtins.toJSON emulator} "$real" > "$out/bin/gateway"
      chmod 755 "$out/bin/gateway"
      # One run through it, in scratch: an instrumented gateway writes its profile at exit.
      mkdir -p "$TMPDIR/smoke" && cd "$TMPDIR/smoke"
      LLVM_PROFILE_FILE="$TMPDIR/smoke/smoke-%p.profraw" "$out/bin/gateway" paths > paths.txt 2> smoke.log \
        || fail "the ${toolchain.target} gateway does not run through ${emulatorBin}: $(tail -n 5 smoke.log)"
      grep -q '"combinations"' paths.txt \
        || fail "the ${toolchain.target} gateway printed no request paths through ${emulatorBin}: $(head -c 300 paths.txt)"
      echo "stage $stage: the ${toolchain.target} gateway runs under ${emulatorBin} (gateway paths: exit 0)"
    '';
  }
