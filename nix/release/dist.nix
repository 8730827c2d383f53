# The release directory (docs/release.md): what a release uploads, and the SHA256SUMS over it.
#
#   llm-gateway-VERSION-ARCH-linux.tar.gz   one per target (nix/release/target.nix)
#   pgo-engine-VERSION-x86_64-linux.tar.gz  the engine, for `verify-proof` without Nix
#   llm-gateway-VERSION-oci.tar             an oci-archive: one OCI layout, its index.json naming
#                                           one image index (llm-gateway:VERSION) that lists each
#                                           target's image manifest with its platform
#   verify                                  nix/release/verify, the release's check
#   SHA256SUMS                              sha256sum's format, over every file above
#
# The signature is not made here: the key never enters the store. nix/release/sign copies this
# directory and signs its SHA256SUMS with ssh-keygen -Y sign.
{
  toolchain,
  # Each target's release (nix/release/target.nix), the builder's first.
  targets,
  # The engine (bin/pgo-engine), built for the builder.
  engine,
  sourceDateEpoch ? 1,
}:
let
  first = builtins.head targets;
  inherit (first) version;
  archive = "llm-gateway-${version}-oci.tar";
  engineBase = "pgo-engine-${version}-${builtins.head (builtins.split "-" toolchain.hostTarget)}-linux";
  pack = import ./pack.nix { inherit sourceDateEpoch; };
  # One image's descriptor in the image index: umoci's descriptor of the image (its manifest's
  # digest and size), with the platform a runtime picks it by instead of umoci's tag.
  addImage = t: ''
    desc=$(tr -d '\n' < ${t.image}/layout/index.json | sed -n 's/.*"manifests":\[{\("mediaType":"application\/vnd.oci.image.manifest.v1+json","digest":"sha256:[0-9a-f]\{64\}","size":[0-9]*\),"annotations":{"org.opencontainers.image.ref.name":"${t.ociArch}"}}\]}$/\1/p')
    [ -n "$desc" ] || fail "${t.image}/layout/index.json is not one manifest tagged ${t.ociArch}: $(cat ${t.image}/layout/index.json)"
    cp -n ${t.image}/layout/blobs/sha256/* layout/blobs/sha256/
    descriptors+=("{$desc,\"platform\":{\"architecture\":\"${t.ociArch}\",\"os\":\"linux\"}}")
  '';
in
toolchain.runStage {
  name = "llm-gateway-${version}-release";
  script = ''
    cd "$TMPDIR"
    mkdir -p "$out" layout/blobs/sha256
    ${builtins.concatStringsSep "\n" (map (t: "cp ${t.tarballFile} \"$out/\"") targets)}

    # The engine for `pgo-engine verify-proof` where there is no Nix.
    mkdir -p ${engineBase}/bin
    cp ${engine}/bin/pgo-engine ${engineBase}/bin/
    cp ${../../LICENSE} ${engineBase}/LICENSE
    ${pack.normaliseModes engineBase}
    chmod 755 ${engineBase}/bin/pgo-engine
    tar ${pack.tarOptions} -cf - ${engineBase} | gzip -n -9 > "$out/${engineBase}.tar.gz"

    # One OCI layout for every target's image: their blobs (umoci's), an image index of their
    # manifests by platform (umoci 0.4 writes no image index), and index.json naming it
    # llm-gateway:VERSION, the name `podman load` gives it.
    descriptors=()
    ${builtins.concatStringsSep "\n" (map addImage targets)}
    cp ${first.image}/layout/oci-layout layout/
    ( IFS=,; printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' "''${descriptors[*]}" ) > image-index.json
    index_sha=$(sha256sum image-index.json | cut -d' ' -f1)
    cp image-index.json "layout/blobs/sha256/$index_sha"
    printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"llm-gateway:${version}"}}]}' \
      "$index_sha" "$(stat -c %s image-index.json)" > layout/index.json
    ${pack.normaliseModes "layout"}
    (cd layout && tar ${pack.tarOptions} -cf "$out/${archive}" oci-layout index.json blobs)

    cp ${./verify} "$out/verify"
    chmod 755 "$out/verify"
    (cd "$out" && sha256sum -- *.tar.gz ${archive} verify > SHA256SUMS)
    cat "$out/SHA256SUMS"
  '';
}
