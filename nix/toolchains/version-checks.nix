# The tool checks every provider's `versions` stage starts with: each tool is an executable, and
# each reports its LLVM version, which must fit rustc's: llvm-profdata of rustc's LLVM major (its
# profdata format must match rustc's profraw), llvm-bolt 19 or newer; and rustc is of the Rust
# release the provider declares (nix/rust-release.nix), which is what the pinned profiles are
# looked up by. Leaves `rustc_line`, `rustc_llvm`, `profdata_llvm` and `bolt_llvm` set for the
# provider's own checks, and `write_versions PROVIDER FILE` to write versions.json: the profile
# key's toolchain part (the release, `rustc -vV` without its host line, `cargo -V`, the target)
# and the LLVM tools' versions. Needs the stage prologue's `fail`.
{
  # Absolute path of rustc.
  rustc,
  # Absolute path of cargo.
  cargo,
  # The provider's `tools` (llvmProfdata, llvmBolt, mergeFdata, readelf).
  tools,
  # The Rust release the provider declares ("1.95.0").
  release,
  # The target triple every build compiles for.
  target,
}:
''
  rustc="${rustc}"
  for tool in "$rustc" ${cargo} ${tools.llvmProfdata} ${tools.llvmBolt} ${tools.mergeFdata} ${tools.readelf}; do
    [ -x "$tool" ] || fail "$tool is not an executable"
  done
  rustc_line=$("$rustc" -V)
  rustc_verbose=$("$rustc" -vV) || fail "$rustc -vV failed"
  rustc_field() { sed -n "s/^$1: //p" <<<"$rustc_verbose"; }
  rustc_llvm=$(rustc_field 'LLVM version')
  rustc_release=$(rustc_field release)
  rustc_commit_hash=$(rustc_field commit-hash)
  [ -n "$rustc_llvm" ] || fail "cannot read rustc's LLVM version"
  [ "$rustc_release" = "${release}" ] \
    || fail "rustc reports release '$rustc_release' ($rustc_line), but this provider declares Rust ${release} (nix/rust-release.nix), the release its pinned profiles are looked up by"
  cargo_line=$(HOME="$TMPDIR" ${cargo} -V) || fail "${cargo} -V failed"
  # `merge --version` is understood by every llvm-profdata since LLVM 3.
  profdata_llvm=$(${tools.llvmProfdata} merge --version | grep -o 'LLVM version [0-9][0-9.]*' | head -n1 | cut -d' ' -f3)
  bolt_llvm=$(${tools.llvmBolt} --version | grep -o 'LLVM version [0-9][0-9.]*' | head -n1 | cut -d' ' -f3)
  [ -n "$profdata_llvm" ] || fail "cannot read the LLVM version of ${tools.llvmProfdata}"
  [ -n "$bolt_llvm" ] || fail "cannot read the LLVM version of ${tools.llvmBolt}"
  if [ "''${profdata_llvm%%.*}" != "''${rustc_llvm%%.*}" ]; then
    fail "${tools.llvmProfdata} is LLVM $profdata_llvm but rustc uses LLVM $rustc_llvm: its profdata would not match rustc's profraw format"
  fi
  if [ "''${bolt_llvm%%.*}" -lt 19 ]; then
    fail "${tools.llvmBolt} is LLVM $bolt_llvm; BOLT 19 or newer is required"
  fi
  write_versions() {
    printf '{"rust_release":"%s","rustc":"%s","rustc_commit_hash":"%s","rustc_llvm":"%s","cargo":"%s","target":"%s","llvm_profdata":"%s","llvm_bolt":"%s","provider":"%s"}\n' \
      "$rustc_release" "$rustc_line" "$rustc_commit_hash" "$rustc_llvm" "$cargo_line" "${target}" \
      "$profdata_llvm" "$bolt_llvm" "$1" > "$2"
  }
''
