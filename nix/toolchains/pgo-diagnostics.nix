# What both providers' `buildPackage { pgoDiagnostics = true; }` keep of a cargo build's log (a
# script snippet; `log` and `out` are shell words): the LLVM profile-use warnings rustc printed
# for the package's own crate and the path crates it builds (third_party/; registry dependencies
# build with `--cap-lints allow`, which silences theirs), without terminal colours, sorted, so
# the file is the same for every build of the same inputs: "function control flow change
# detected (hash mismatch)" and "no profile data available for function". A missing log fails
# the build rather than reading as "no warnings".
log: out: ''
  if [ ! -s ${log} ]; then
    echo "error: no cargo build log at ${log} to read the PGO diagnostics from" >&2
    exit 1
  fi
  sed 's/\x1b\[[0-9;]*m//g' ${log} \
    | { grep -E 'hash mismatch|no profile data available for function' || true; } \
    | LC_ALL=C sort > ${out}
''
