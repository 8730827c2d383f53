# The release of one target's artifact (docs/release.md): its tarball and its OCI image, each a
# derivation of the chain's gateway-pgo-bolt output, bit-identical on rebuild.
#
#   manifest  RELEASE.json: what the release is (version, revision, target) and the digests that tie
#             the binary to its proof marker. The marker records the PGO binary BOLT read
#             (profiles.bolt.pgo_binary_sha256), not the final binary, so the digest of the binary
#             that ships is recorded here, from the artifact itself, beside the marker's digest.
#   tarball   llm-gateway-VERSION-ARCH-linux.tar.gz: bin/gateway, share/gateway/ (proof marker,
#             request paths, BOLT log), RELEASE.json, the example config, LICENSE and
#             THIRD-PARTY-NOTICES. GNU tar with sorted names, mtime 1, owner 0, `gzip -n`.
#   image     an OCI image layout (index.json, blobs/) built by Debian's umoci: the binary, the
#             shared libraries it needs (its NEEDED entries, closed over, from the host's glibc),
#             a non-root user, the marker and RELEASE.json under /usr/share/gateway, labels with
#             the revision and both digests, the config read from /etc/gateway/config.json.
#
# A build from profiles trained in the build still gets its tarball and image, labelled so
# (RELEASE.json's and the image's `profiles`); nix/release/verify refuses it as a release.
{
  toolchain,
  # The chain's artifact: bin/BINARY and share/BINARY/proof.json.
  artifact,
  # THIRD-PARTY-NOTICES (nix/release/notices.nix) for this target.
  notices,
  # The example config (examples/gateway.json).
  exampleConfig,
  version,
  # The source revision (a git commit) and the source's URL (null: no `source` label).
  revision,
  sourceUrl ? null,
  binary ? "gateway",
  name ? "llm-gateway",
  # Every timestamp of the release (tar mtimes, the image's `created`).
  sourceDateEpoch ? 1,
  # Debian's umoci, by absolute path, and the version it must report.
  umoci ? "/usr/bin/umoci",
  umociVersion ? "0.4.7",
}:
let
  target = toolchain.target;
  arch = builtins.head (builtins.split "-" target);
  ociArch =
    { x86_64 = "amd64"; aarch64 = "arm64"; }.${arch}
      or (throw "nix/release/target.nix: no OCI architecture known for ${target}");
  # Where the target's glibc lives on the builder: the multiarch directory, or for a cross target
  # without libc6:ARCH the cross sysroot (nix/offline/aarch64-setup installs libc6-dev-arm64-cross).
  multiarch = "${arch}-linux-gnu";
  libSearch =
    if arch == "x86_64" then [ "/lib/${multiarch}" "/usr/lib/${multiarch}" ]
    else [ "/lib/${multiarch}" "/usr/lib/${multiarch}" "/usr/${multiarch}/lib" ];
  base = "${name}-${version}-${arch}-linux";
  readelf = toolchain.tools.readelf;
  created = "1970-01-01T00:00:0${toString sourceDateEpoch}Z";
  json = builtins.toJSON;
  pack = import ./pack.nix { inherit sourceDateEpoch; };

  manifest = toolchain.runStage {
    name = "${name}-release-manifest";
    script = ''
      bin=${artifact}/bin/${binary}
      marker=${artifact}/share/${binary}/proof.json
      [ -f "$bin" ] || fail "no binary at $bin"
      [ -f "$marker" ] || fail "no proof marker at $marker"
      field() { sed -n "s/^  \"$1\": \"\(.*\)\",\{0,1\}$/\1/p" "$marker" | head -n1; }
      marker_target=$(field target)
      [ "$marker_target" = ${target} ] || fail "the marker's target is '$marker_target', not ${target}"
      # The section's provenance: "pinned", or "trained in build" (labelled, refused as a release).
      provenance=$(sed -n '/^  "profiles": {/,/^  }/s/^    "provenance": "\(.*\)",\{0,1\}$/\1/p' "$marker")
      case "$provenance" in
        pinned|"trained in build") ;;
        *) fail "the marker's profiles.provenance is '$provenance'" ;;
      esac
      pgo_binary=$(sed -n 's/^      "pgo_binary_sha256": "\([0-9a-f]\{64\}\)",\{0,1\}$/\1/p' "$marker" | head -n1)
      binary_sha=$(sha256sum "$bin" | cut -d' ' -f1)
      marker_sha=$(sha256sum "$marker" | cut -d' ' -f1)
      mkdir -p "$out"
      cat > "$out/RELEASE.json" <<EOF
      {
        "schema": 1,
        "name": ${json name},
        "version": ${json version},
        "revision": ${json revision},
        "source": ${json sourceUrl},
        "target": ${json target},
        "binary": "bin/${binary}",
        "binary_sha256": "$binary_sha",
        "proof_marker": "share/${binary}/proof.json",
        "proof_marker_sha256": "$marker_sha",
        "pgo_binary_sha256": "$pgo_binary",
        "profiles": "$provenance",
        "artifact": "${artifact}"
      }
      EOF
      echo "$binary_sha" > "$out/binary.sha256"
      echo "$marker_sha" > "$out/proof.sha256"
      echo "$provenance" > "$out/profiles"
      cat "$out/RELEASE.json"
    '';
  };

  tarball = toolchain.runStage {
    name = "${base}-tarball";
    script = ''
      cd "$TMPDIR"
      d=${base}
      mkdir -p "$d/bin" "$d/share/${binary}" "$d/config"
      cp ${artifact}/bin/${binary} "$d/bin/"
      cp ${artifact}/share/${binary}/* "$d/share/${binary}/"
      cp ${manifest}/RELEASE.json "$d/"
      cp ${exampleConfig} "$d/config/gateway.json"
      cp ${../../LICENSE} "$d/LICENSE"
      cp ${notices}/THIRD-PARTY-NOTICES "$d/"
      ${pack.normaliseModes "\"$d\""}
      chmod 755 "$d/bin/${binary}"
      mkdir -p "$out"
      tar ${pack.tarOptions} -cf - "$d" | gzip -n -9 > "$out/${base}.tar.gz" \
        || fail "tar of $d failed"
      echo "stage $stage: $(tar -tzvf "$out/${base}.tar.gz" | wc -l) entries, $(stat -c %s "$out/${base}.tar.gz") bytes"
    '';
  };

  labels = {
    "org.opencontainers.image.title" = name;
    "org.opencontainers.image.description" = "PGO+BOLT-optimized LLM gateway (OpenAI and Anthropic dialects); proof marker at /usr/share/${binary}/proof.json";
    "org.opencontainers.image.version" = version;
    "org.opencontainers.image.revision" = revision;
    "org.opencontainers.image.licenses" = "Apache-2.0";
    "org.opencontainers.image.created" = created;
  } // (if sourceUrl == null then { } else { "org.opencontainers.image.source" = sourceUrl; });

  image = toolchain.runStage {
    name = "${name}-${version}-${ociArch}-oci-layout";
    script = ''
      export HOME="$TMPDIR/home" SOURCE_DATE_EPOCH=${toString sourceDateEpoch}
      mkdir -p "$HOME"
      umoci=${umoci}
      [ -x "$umoci" ] || fail "no umoci at $umoci (apt-get install umoci)"
      found=$("$umoci" --version)
      case "$found" in
        "umoci version ${umociVersion}"|"umoci version ${umociVersion}+"*) ;;
        *) fail "$umoci is '$found', not umoci ${umociVersion}" ;;
      esac
      cd "$TMPDIR"
      bin=${artifact}/bin/${binary}
      "$umoci" init --layout layout
      "$umoci" new --image layout:${ociArch}
      rootfs=$TMPDIR/rootfs
      mkdir -p "$rootfs/usr/bin" "$rootfs/usr/share/${binary}" "$rootfs/usr/share/doc/${name}" \
        "$rootfs/etc/gateway" "$rootfs/tmp"
      cp "$bin" "$rootfs/usr/bin/${binary}"
      cp ${artifact}/share/${binary}/proof.json ${artifact}/share/${binary}/request-paths.json \
        "$rootfs/usr/share/${binary}/"
      cp ${manifest}/RELEASE.json "$rootfs/usr/share/${binary}/"
      cp ${../../LICENSE} "$rootfs/usr/share/doc/${name}/LICENSE"
      cp ${notices}/THIRD-PARTY-NOTICES "$rootfs/usr/share/doc/${name}/"

      # The runtime libraries: the binary's interpreter and its NEEDED entries, closed over, each
      # copied (dereferenced) from the builder's glibc to the path the loader looks in.
      interp=$(${readelf} -l -W "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
      [ -n "$interp" ] || fail "$bin has no program interpreter: not the dynamic glibc binary expected"
      find_lib() {
        for dir in ${toString libSearch}; do
          [ -e "$dir/$1" ] && { echo "$dir/$1"; return 0; }
        done
        return 1
      }
      interp_src=$(find_lib "$(basename "$interp")") || fail "no $interp for ${target} on the builder (${toString libSearch})"
      mkdir -p "$rootfs$(dirname "$interp")"
      cp -L "$interp_src" "$rootfs$interp"
      echo "$interp" > "$TMPDIR/libs.txt"
      todo=("$bin")
      seen=" "
      while [ ''${#todo[@]} -gt 0 ]; do
        file=''${todo[0]}; todo=("''${todo[@]:1}")
        for lib in $(${readelf} -d -W "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
          case "$seen" in *" $lib "*) continue ;; esac
          seen="$seen$lib "
          [ "$lib" = "$(basename "$interp")" ] && continue
          src_lib=$(find_lib "$lib") || fail "$file needs $lib, which the builder's ${target} glibc (${toString libSearch}) does not have"
          mkdir -p "$rootfs/lib/${multiarch}"
          cp -L "$src_lib" "$rootfs/lib/${multiarch}/$lib"
          echo "/lib/${multiarch}/$lib" >> "$TMPDIR/libs.txt"
          todo+=("$src_lib")
        done
      done
      glibc=$(strings "$rootfs/lib/${multiarch}/libc.so.6" | sed -n 's/^GNU C Library (\(.*\)) .*release version \(.*\)\.$/\1 \2/p' | head -n1)
      [ -n "$glibc" ] || fail "cannot read the glibc version of libc.so.6"
      for pkg in libc6 libgcc-s1; do
        [ -f /usr/share/doc/$pkg/copyright ] || fail "no /usr/share/doc/$pkg/copyright on the builder"
        mkdir -p "$rootfs/usr/share/doc/$pkg"
        cp /usr/share/doc/$pkg/copyright "$rootfs/usr/share/doc/$pkg/"
      done

      # A non-root user; the config is a file mounted at /etc/gateway/config.json.
      printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ngateway:x:65532:65532:gateway:/nonexistent:/usr/sbin/nologin\n' > "$rootfs/etc/passwd"
      printf 'root:x:0:\ngateway:x:65532:\n' > "$rootfs/etc/group"

      # Modes normalised; the layer is a GNU tar with sorted names, one mtime and owner 0, added
      # verbatim by umoci (which compresses it).
      ${pack.normaliseModes "\"$rootfs\""}
      chmod 755 "$rootfs/usr/bin/${binary}" "$rootfs$interp"
      chmod 1777 "$rootfs/tmp"
      (cd "$rootfs" && tar ${pack.tarOptions} -cf "$TMPDIR/layer.tar" etc lib* tmp usr) \
        || fail "tar of the image's root file system failed"
      "$umoci" raw add-layer --image layout:${ociArch} --history.created ${created} \
        --history.created_by "nix/release/target.nix: the gateway, its runtime libraries, its marker" \
        "$TMPDIR/layer.tar" \
        || fail "umoci raw add-layer failed"
      label_args=()
      while IFS= read -r kv; do label_args+=(--config.label "$kv"); done <<'LABELS'
      ${builtins.concatStringsSep "\n" (builtins.attrValues (builtins.mapAttrs (k: v: "${k}=${v}") labels))}
      LABELS
      "$umoci" config --no-history --image layout:${ociArch} \
        --created ${created} \
        --author ${json name} \
        --os linux --architecture ${ociArch} \
        --config.user 65532:65532 \
        --config.workingdir / \
        --config.entrypoint /usr/bin/${binary} \
        --config.cmd=--config --config.cmd=/etc/gateway/config.json \
        --config.exposedports 8080/tcp \
        --config.env PATH=/usr/bin \
        "''${label_args[@]}" \
        --config.label "org.llm-gateway.binary.sha256=$(cat ${manifest}/binary.sha256)" \
        --config.label "org.llm-gateway.proof.sha256=$(cat ${manifest}/proof.sha256)" \
        --config.label "org.llm-gateway.proof.path=/usr/share/${binary}/proof.json" \
        --config.label "org.llm-gateway.profiles=$(cat ${manifest}/profiles)" \
        --config.label "org.llm-gateway.target=${target}" \
        --config.label "org.llm-gateway.glibc=$glibc" \
        --manifest.annotation "org.opencontainers.image.revision=${revision}" \
        --manifest.annotation "org.opencontainers.image.version=${version}" \
        || fail "umoci config failed"
      "$umoci" gc --layout layout || fail "umoci gc failed"
      mkdir -p "$out"
      cp -r layout "$out/layout"
      cp "$TMPDIR/libs.txt" "$out/runtime-libraries.txt"
      echo "stage $stage: ${ociArch} image: $(tr '\n' ' ' < "$TMPDIR/libs.txt")($glibc); $(du -sb "$out/layout/blobs" | cut -f1) bytes of blobs"
    '';
  };
in
{
  inherit manifest notices tarball image ociArch arch base version;
  tarballFile = "${tarball}/${base}.tar.gz";
}
