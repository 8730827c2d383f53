# One file per stage; each is a function of the toolchain and of its inputs.
{ toolchain }:
let
  stage = file: args: import file ({ inherit toolchain; } // args);
in
{
  coverage = stage ./coverage.nix;
  emulated = stage ./emulated.nix;
  instrumented = stage ./instrumented.nix;
  training-check = stage ./training-check.nix;
  fresh-profile = stage ./fresh-profile.nix;
  llvm-profile = stage ./llvm-profile.nix;
  pgo = stage ./pgo.nix;
  bolt-instrument = stage ./bolt-instrument.nix;
  bolt-profile = stage ./bolt-profile.nix;
  bolt-optimize = stage ./bolt-optimize.nix;
  holdout = stage ./holdout.nix;
  instructions-gate = stage ./instructions-gate.nix;
}
