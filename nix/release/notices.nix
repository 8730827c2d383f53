# THIRD-PARTY-NOTICES of the release: every crate the gateway's binary links for its target
# (`cargo tree -e normal`: no build or dev dependencies), its version and licence expression from
# its manifest, and the licence files it ships (LICENSE*, LICENCE*, COPYING*, NOTICE*, COPYRIGHT*,
# UNLICENSE) from the vendored sources, the patched hyper under third_party/ included. Fails
# closed: a crate cargo names that is neither vendored nor a path dependency fails the stage.
{
  toolchain,
  # Absolute path of the rustup toolchain (cargo).
  rustToolchain,
  # The workspace source (every member whole: cargo loads them all) and the `cargo vendor`
  # directory of Cargo.lock.
  src,
  vendor,
  # The workspace package whose dependencies are listed.
  package ? "gateway",
}:
toolchain.runStage {
  name = "${package}-third-party-notices";
  script = ''
    export HOME="$TMPDIR/home" CARGO_HOME="$TMPDIR/cargo-home"
    export PATH="${rustToolchain}/bin:/usr/bin:/bin"
    cd ${src}
    cargo tree --offline --locked -p ${package} \
      --config 'source.crates-io.replace-with="vendored"' --config 'source.vendored.directory="${vendor}"' \
      --target ${toolchain.target} -e normal \
      --prefix none --no-dedupe -f '{p}|{l}' > "$TMPDIR/tree.txt" \
      || fail "cargo tree of ${package} failed"
    # "name vX.Y.Z (path)|licence" -> name, version, path (a path dependency) and licence.
    sed -e 's/ (\*)//' "$TMPDIR/tree.txt" | sort -u > "$TMPDIR/crates.txt"
    out_file="$TMPDIR/THIRD-PARTY-NOTICES"
    {
      echo "Third-party software in the ${package} binary (${toolchain.target})"
      echo
      echo "The binary is built from the Rust crates below (cargo tree -e normal of Cargo.lock, the"
      echo "procedural macros among them) and the Rust standard library (MIT OR Apache-2.0,"
      echo "https://github.com/rust-lang/rust), all linked statically."
      echo "Each crate's licence expression is its manifest's; its licence files follow the list."
      echo
    } > "$out_file"
    count=0
    while IFS='|' read -r spec licence; do
      name=''${spec%% *}
      rest=''${spec#* v}
      version=''${rest%% *}
      [ "$name" = ${package} ] && continue
      printf '  %-40s %-12s %s\n' "$name" "$version" "''${licence:-(no licence field)}" >> "$out_file"
      count=$((count + 1))
    done < "$TMPDIR/crates.txt"
    [ "$count" -gt 0 ] || fail "cargo tree named no dependency of ${package}"
    while IFS='|' read -r spec licence; do
      name=''${spec%% *}
      rest=''${spec#* v}
      version=''${rest%% *}
      [ "$name" = ${package} ] && continue
      case "$spec" in
        *"(${src}/"*) dir=''${spec#*(}; dir=''${dir%)} ;;
        *) dir=${vendor}/$name-$version ;;
      esac
      [ -d "$dir" ] || fail "no source of $name $version at $dir (neither vendored nor a path dependency)"
      {
        echo
        echo "================================================================================"
        echo "$name $version: ''${licence:-(no licence field)}"
        echo "================================================================================"
      } >> "$out_file"
      files=$(find "$dir" -maxdepth 1 -type f \( -iname 'LICEN[SC]E*' -o -iname 'COPYING*' \
        -o -iname 'NOTICE*' -o -iname 'COPYRIGHT*' -o -iname 'UNLICENSE*' \) | LC_ALL=C sort)
      if [ -z "$files" ]; then
        echo "(the crate ships no licence file; its licence is the expression above)" >> "$out_file"
      fi
      for f in $files; do
        echo "--- $(basename "$f")" >> "$out_file"
        cat "$f" >> "$out_file"
        echo >> "$out_file"
      done
    done < "$TMPDIR/crates.txt"
    mkdir -p "$out"
    cp "$out_file" "$out/THIRD-PARTY-NOTICES"
    echo "stage $stage: $count crates listed"
  '';
}
