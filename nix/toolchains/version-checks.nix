# The tool checks every provider's `versions` stage starts with: each tool is an executable, and
# each reports its LLVM version, which must fit rustc's: llvm-profdata of rustc's LLVM major (its
# profdata format must match rustc's profraw), llvm-bolt 19 or newer. Leaves `rustc_line`,
# `rustc_llvm`, `profdata_llvm` and `bolt_llvm` set for the provider's own checks and its
# versions.json. Needs the stage prologue's `fail`.
{
  # Absolute path of rustc.
  rustc,
  # The provider's `tools` (llvmProfdata, llvmBolt, mergeFdata, readelf).
  tools,
}:
''
  rustc="${rustc}"
  for tool in "$rustc" ${tools.llvmProfdata} ${tools.llvmBolt} ${tools.mergeFdata} ${tools.readelf}; do
    [ -x "$tool" ] || fail "$tool is not an executable"
  done
  rustc_line=$("$rustc" -V)
  rustc_llvm=$("$rustc" -vV | sed -n 's/^LLVM version: //p')
  [ -n "$rustc_llvm" ] || fail "cannot read rustc's LLVM version"
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
''
