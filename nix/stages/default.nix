# One file per stage of the chain (nix/lib/build-chain.nix); each is a function of the toolchain and
# of its inputs. The gateway's own stages are in nix/gateway/.
{ toolchain }:
let
  stage = file: args: import file ({ inherit toolchain; } // args);
in
{
  emulated = stage ./emulated.nix;
  instrumented = stage ./instrumented.nix;
  training-check = stage ./training-check.nix;
  fresh-profile = stage ./fresh-profile.nix;
  llvm-profile = stage ./llvm-profile.nix;
  pgo = stage ./pgo.nix;
  bolt-instrument = stage ./bolt-instrument.nix;
  bolt-profile = stage ./bolt-profile.nix;
  bolt-optimize = stage ./bolt-optimize.nix;
  holdout-instructions = stage ./holdout-instructions.nix;
}
