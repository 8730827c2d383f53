# The farm's preflight: one tiny derivation a builder, which fails unless the builder's sandbox holds
# every host path the stages need (nix/offline/build --sandbox-paths). A builder's sandbox-paths are
# its own configuration, which no client option reaches; the probe reads them from inside the
# sandbox, before any stage is sent there.
{
  # The host paths, space-separated, as nix/offline/build --sandbox-paths prints them.
  paths,
  # The builder's name: part of the derivation, so that each builder builds a probe of its own.
  builder,
  # A fresh value per run: a probe is never taken from a store or a cache.
  nonce,
}:
derivation {
  name = "farm-sandbox-probe-${builder}";
  system = "x86_64-linux";
  builder = "/bin/sh";
  inherit paths nonce;
  args = [
    "-c"
    ''
      missing=
      for p in $paths; do
        [ -e "$p" ] || missing="$missing $p"
      done
      if [ -n "$missing" ]; then
        echo "farm sandbox probe: builder ${builder} lacks in its sandbox:$missing" >&2
        exit 1
      fi
      echo ok > $out
    ''
  ];
}
