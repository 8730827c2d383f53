# The check both pinned-profile stages start with, as a script snippet: the pinned directory
# exists, and `trainer profile verify` accepts it (its file is the one its manifest names, for
# this system and toolchain, and, for BOLT, it belongs to this build's PGO binary); otherwise the
# stage fails naming the refresh command. Needs the stage prologue's `fail`.
{
  toolchain,
  # "llvm" or "bolt".
  kind,
  # The pinned directory as a store path, or null when the repository has none.
  pinned,
  # Where under profiles/ it would be, for the message.
  where,
  versions,
  trainer,
  refreshCommand,
  # BOLT: the PGO stage whose binary the profile must belong to.
  pgo ? null,
}:
if pinned == null then
  ''
    fail "no pinned ${kind} profile at profiles/${where}: create it with \`${refreshCommand}\` and commit profiles/"
  ''
else
  ''
    ${trainer}/bin/trainer profile verify \
      --kind ${kind} \
      --dir ${pinned} \
      --versions ${versions}/versions.json \
      --system ${toolchain.system} \
      ${if pgo == null then "" else "--pgo-binary ${pgo}/bin/gateway"} \
      --refresh-command ${builtins.toJSON refreshCommand} \
      || fail "the pinned ${kind} profile was refused (see above)"
  ''
