# The gateway's own pieces, beside the chain every crate gets (nix/stages/): its training command,
# the coverage gate, and the holdout gates on its shapes. Each is a function of the toolchain and
# of its inputs.
{ toolchain }:
let
  stage = file: args: import file ({ inherit toolchain; } // args);
in
{
  training = stage ./training.nix;
  coverage = stage ./coverage.nix;
  holdout = stage ./holdout.nix;
  instructions-gate = stage ./instructions-gate.nix;
}
