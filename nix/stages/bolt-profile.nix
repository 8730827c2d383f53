# Stage 7: the pinned BOLT profile (profiles/<system>/<provider>/bolt, committed) checked before
# the optimization uses it: pinned-verify.nix refuses a profile whose file is not the one its
# manifest names (corrupt), that was made with another toolchain, or that belongs to another PGO
# binary than this build's (sha256 of bin/gateway), naming the refresh command. The fdata is
# copied unchanged: it is already canonical (sorted).
{
  toolchain,
  # The pinned directory (gateway.fdata, manifest.json) as a store path, or null when the
  # repository has none for this system and provider.
  pinned,
  # Output of the PGO stage: the binary the profile must belong to.
  pgo,
  versions,
  trainer,
  # The command that refreshes the pinned profiles, named in every failure.
  refreshCommand,
}:
toolchain.runStage {
  name = "gateway-bolt-profile";
  # A missing pinned directory fails in the snippet; nothing after it may name the path.
  script =
    import ./pinned-verify.nix {
      inherit toolchain pinned pgo versions trainer refreshCommand;
      kind = "bolt";
      where = "${toolchain.system}/${toolchain.name}/bolt";
    }
    + (if pinned == null then "" else ''
      mkdir -p "$out"
      cp ${pinned}/gateway.fdata ${pinned}/manifest.json "$out/"
    '');
}
