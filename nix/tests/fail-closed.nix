# Compositions of the real stages with one input broken each. Every attribute here must FAIL to
# build, with a message naming the stage and the cause; tests/pipeline/test_fail_closed.py builds
# each one and checks the message. Arguments are those of nix/offline/default.nix.
args@{ rustToolchain, vendorDir, ... }:
let
  chain = import ../offline/default.nix args;
  inherit (chain) stages toolchain trainer shapes versions refreshCommand;

  withTools = toolOverrides: import ../offline/default.nix (args // { inherit toolOverrides; });
  withPinned = pinned: import ../offline/default.nix (args // { pinned = chain.pinned // pinned; });

  # The chain with the real pinned directory of `kind` edited by `edit` (bash, run in a copy);
  # `resum` records the edited file's sha256 in the manifest, so that only what the edit is about
  # is wrong.
  withEdited =
    { name, kind, edit, resum ? true }:
    let
      file = if kind == "llvm" then "gateway.proftext" else "gateway.fdata";
    in
    withPinned {
      ${kind} = toolchain.runStage {
        name = "pinned-profile-${name}";
        script = ''
          cp -r ${chain.pinned.${kind}} "$out"
          chmod -R u+w "$out"
          cd "$out"
          ${edit}
          ${if resum then ''
            sum=$(sha256sum ${file} | cut -d' ' -f1)
            sed -i "s/^  \"sha256\": \"[0-9a-f]*\"/  \"sha256\": \"$sum\"/" manifest.json
          '' else ""}
        '';
      };
    };

  # Sets `hot` to the gateway crate's function with the most branch records in the pinned fdata
  # (ties broken by name), in the directory `withEdited` edits.
  hottestGatewayFunction = ''
    hot=$(awk '$2 ~ /^_ZN7gateway/ { n[$2]++ }
               END { for (f in n) if (n[f] > best || (n[f] == best && f < hot)) { best = n[f]; hot = f }
                     print hot }' gateway.fdata)
    [ -n "$hot" ] || fail "no function of the gateway crate in the pinned fdata"
    echo "the edited function: $hot"
  '';

  # A gateway that serves normally but exits 3 when told to stop, as a failed shutdown would.
  gatewayExitingNonZero = toolchain.runStage {
    name = "gateway-exits-nonzero";
    script = ''
      mkdir -p "$out/bin"
      cat > "$out/bin/gateway" <<'WRAPPER'
      #!/bin/bash
      "$(dirname "$0")/real-gateway" "$@" &
      child=$!
      trap 'kill -TERM $child; wait $child; exit 3' TERM INT
      wait $child
      WRAPPER
      cp ${chain.gateway-instrumented}/bin/gateway "$out/bin/real-gateway"
      chmod +x "$out/bin/gateway"
    '';
  };

  # "Gateways" that answer by themselves (the trainer's fake gateway), one of them with a 500 to
  # every request: a holdout batch with failed requests is invalid whatever the machine's load,
  # so the gate must fail it.
  selfAnswering = name: env: toolchain.runStage {
    inherit name;
    script = ''
      mkdir -p "$out/bin"
      printf '#!/bin/sh\n%s exec %s fake-gateway "$@"\n' '${env}' ${trainer}/bin/trainer > "$out/bin/gateway"
      chmod +x "$out/bin/gateway"
    '';
  };
  selfAnsweringGateway = selfAnswering "gateway-self-answering" "";
  failingGateway = selfAnswering "gateway-answering-500" "FAKE_GATEWAY_STATUS=500";

  # An instrumented gateway that also leaves a profraw that is not a profile.
  gatewayWritingCorruptProfraw = toolchain.runStage {
    name = "gateway-corrupt-profraw";
    script = ''
      mkdir -p "$out/bin"
      cat > "$out/bin/gateway" <<'WRAPPER'
      #!/bin/bash
      "$(dirname "$0")/real-gateway" "$@" &
      child=$!
      trap 'kill -TERM $child; wait $child; status=$?
            head -c 4096 /dev/urandom > "$(dirname "$LLVM_PROFILE_FILE")/corrupt-$$.profraw"
            exit $status' TERM INT
      wait $child
      WRAPPER
      cp ${chain.gateway-instrumented}/bin/gateway "$out/bin/real-gateway"
      chmod +x "$out/bin/gateway"
    '';
  };

  # The repository's shapes without the only shape of posture keys and the three native streaming
  # messages shapes (two generic, one agent-shaped): two combinations no shape trains.
  shapesWithoutSome = toolchain.runStage {
    name = "shapes-some-removed";
    script = ''
      cp -r ${shapes} "$out"
      chmod -R u+w "$out"
      for s in chat-minimal-keys messages-minimal-stream messages-mid-stream agent-claude-code-stream; do
        rm "$out/$s.json" || fail "no shape $s to remove: choose another for this test"
      done
    '';
  };

  # The repository's shapes with every streaming shape at a tenth of its requests: no code
  # changed and every request path is still trained (the coverage gate passes), but the training's
  # hot path moved from the streams to the plain requests, as a changed config default or a
  # reweighted shape set would move it.
  shapesHotPathMoved = toolchain.runStage {
    name = "shapes-hot-path-moved";
    script = ''
      cp -r ${shapes} "$out"
      chmod -R u+w "$out"
      moved=0
      for f in "$out"/*.json; do
        grep -q '"stream": true' "$f" || continue
        n=$(sed -n 's/.*"requests": \([0-9]*\).*/\1/p' "$f")
        [ -n "$n" ] || fail "no requests in $f: this test needs another way to move the hot path"
        sed -i "s/\"requests\": $n/\"requests\": $((n / 10))/" "$f"
        moved=$((moved + 1))
      done
      [ "$moved" -ge 10 ] || fail "only $moved streaming shapes: choose another way to move the hot path"
    '';
  };

  # The LLVM training check of chain `c` (nix/pipeline.nix) on `instrumented`, against `pinned`.
  llvmCheckIn =
    c: { name ? "gateway-training", instrumented, pinned }:
    c.stages.training-check {
      inherit name instrumented pinned;
      kind = "llvm";
      binary = "gateway";
      command = c.stages.training { inherit (c) trainer shapes; };
      engine = c.pgo-engine;
      minOverlap = c.thresholds.llvmMinOverlap;
      inherit (c) refreshCommand;
    };
  llvmCheckOf = instrumented: llvmCheckIn chain {
    inherit instrumented;
    pinned = chain.gateway-profile;
  };

  # The sources with one hot function edited (one more branch, behaviour unchanged): its
  # control-flow hash changes, and the pinned profile has not been refreshed. `anchor` (fixed
  # text) finds the function's file under `dir`, `edit` is the sed script that adds the branch,
  # `applied` (fixed text) shows that it did.
  editedSource =
    {
      what,
      dir,
      anchor,
      edit,
      applied,
    }:
    toolchain.runStage {
      name = "gateway-workspace-source-edited";
      script = ''
        cp -r ${toolchain.src} "$out"
        chmod -R u+w "$out"
        file=$(grep -rlF '${anchor}' "$out/${dir}") \
          || fail "no ${what} in ${dir}: choose another hot function for this test"
        sed -i -f ${builtins.toFile "hot-function-edit.sed" edit} "$file"
        grep -qF '${applied}' "$file" || fail "the edit of ${what} in $file did not apply"
      '';
    };

  # The JSON scanner's value walk: every request body and every native stream frame goes through
  # it, and it is too big to be inlined before instrumentation, so the profile has it.
  gatewayFunctionEdited = editedSource {
    what = "Cursor::value";
    dir = "gateway/src";
    anchor = "fn value(&mut self, depth: usize)";
    edit = ''
      /c @ (b'{' | b'\[') => {/i\
                      b'~' if depth == usize::MAX => return Ok(()),
    '';
    applied = "usize::MAX => return Ok";
  };

  # hyper's request-head parse in the patched copy (third_party/README.md): every request goes
  # through it, and the profile covers the copy as it covers the gateway.
  hyperFunctionEdited = editedSource {
    what = "Server::parse";
    dir = "third_party/hyper/src/proto/h1";
    anchor = "ParseResult<RequestLine>";
    edit = ''
      /let path_range;/i\
              if buf.len() == usize::MAX { return Ok(None); }
    '';
    applied = "if buf.len() == usize::MAX";
  };

  # The aarch64 chain (cross, trained under qemu-user), with tool overrides.
  aarch64Args = args // { target = "aarch64-unknown-linux-gnu"; };
  aarch64 = import ../offline/default.nix aarch64Args;
  aarch64With = toolOverrides: import ../offline/default.nix (aarch64Args // { inherit toolOverrides; });

  # A small aarch64 program linked with relocations, in place of the aarch64 PGO build where a
  # case is about a tool and not about the gateway (no 30-minute cross build for it).
  tinyAarch64 = aarch64.toolchain.runStage {
    name = "tiny-program";
    script = ''
      mkdir -p "$out/bin"
      printf 'int main(int argc, char **argv) { return argc > 5; }\n' > main.c
      /usr/bin/aarch64-linux-gnu-gcc -O1 -Wl,--emit-relocs -o "$out/bin/gateway" main.c \
        || fail "cannot link the aarch64 program"
    '';
  };
  # The template's crate (templates/default) through the library (nix/lib/build-chain.nix) with
  # another training command: a crate's chain, cheap to build.
  template = chain.templates.default;
  templateWith =
    args':
    chain.lib.buildChain ({
      inherit (template.crate) package src;
      cargoToml = ../../templates/default/Cargo.toml;
      refreshCommand = "nix/offline/refresh-profiles --chain templates.default";
    } // args');
in
{
  # A crate's training command that fails: the fresh profile stage fails, naming the command's
  # exit status (the training contract, docs/library.md).
  library-training-command-fails = (templateWith { trainingCommand = "exit 3"; }).profile-fresh;

  # A crate's training command that never runs the binary leaves no profile: the stage fails.
  library-training-leaves-no-profile = (templateWith { trainingCommand = "true"; }).profile-fresh;

  # A published crate's source changed after cargo vendored it (here: the template's crate with a
  # checksum file that records another main.rs): the source stage refuses it.
  library-crate-not-as-vendored = import ../offline/registry-crate.nix {
    inherit toolchain;
    name = "wordfreq-source";
    package = "wordfreq";
    crate = toolchain.runStage {
      name = "wordfreq-vendored";
      script = ''
        cp -r ${template.crate.src} "$out"
        chmod -R u+w "$out"
        printf '{"files":{"Cargo.toml":"%s","Cargo.lock":"%s","src/main.rs":"%s"},"package":"%s"}' \
          "$(sha256sum < "$out/Cargo.toml" | cut -d' ' -f1)" "$(sha256sum < "$out/Cargo.lock" | cut -d' ' -f1)" \
          "$(echo 'fn main() {}' | sha256sum | cut -d' ' -f1)" "$(printf 0%.0s {1..64})" > "$out/.cargo-checksum.json"
      '';
    };
    lock = builtins.toFile "Cargo.lock" ''
      [[package]]
      name = "wordfreq"
      version = "0.1.0"
      source = "registry+https://github.com/rust-lang/crates.io-index"
      checksum = "${builtins.concatStringsSep "" (builtins.genList (_: "0") 64)}"
    '';
  };

  # Training a binary without instrumentation leaves no profraw: the training check fails.
  training-without-instrumentation = llvmCheckOf chain.gateway;

  # The gateway exits 3 instead of 0 on SIGTERM: the training check fails.
  training-gateway-exits-nonzero = llvmCheckOf gatewayExitingNonZero;

  # No redis-server for the shared-limits shape's store: the training stage fails at that shape.
  training-without-redis-server =
    (withTools { redisServer = "/nonexistent/redis-server"; }).gateway-training;

  # A corrupt profraw among the training's: the merge in the training check fails.
  training-with-corrupt-profraw = llvmCheckOf gatewayWritingCorruptProfraw;

  # A batch the wall-clock holdout gate cannot believe (here: the optimized legs' requests fail):
  # the gate fails it instead of passing it, naming why. Needs `--option extra-system-features
  # gateway-benchmark`.
  holdout-invalid-batch = stages.holdout {
    plain = selfAnsweringGateway;
    optimized = failingGateway;
    inherit trainer shapes;
  };

  # llvm-profdata of LLVM 14 while rustc is LLVM 22: the toolchain check refuses it, and the
  # profile stage, which depends on it, never runs.
  profile-with-wrong-llvm-profdata =
    (withTools { llvmProfdata = "/usr/lib/llvm-14/bin/llvm-profdata"; }).gateway-profile;

  # No BOLT runtime library: the BOLT instrumentation stage fails.
  bolt-without-runtime-library =
    (withTools { boltRuntimeLib = "/nonexistent/libbolt_rt_instr.a"; }).gateway-bolt-instrumented;

  # An llvm-bolt older than 19 is refused by the toolchain check (LLVM 14's llc stands in for a
  # BOLT 14: the check reads only the version line every LLVM tool prints).
  bolt-too-old = (withTools { llvmBolt = "/usr/lib/llvm-14/bin/llc"; }).versions;

  # No pinned profiles: the artifact builds from profiles trained in the build
  # (nix/tests/profile-fit.nix), but the release check refuses it, naming the refresh command.
  release-check-trained-in-build =
    (import ./profile-fit.nix args).chains.trainedInBuild.release-check;

  # One byte of the pinned LLVM profile changed: its sha256 no longer matches its manifest.
  pinned-llvm-profile-corrupt = (withEdited {
    name = "llvm-corrupt";
    kind = "llvm";
    edit = "sed -i '0,/^[0-9][0-9]*$/s//7/' gateway.proftext";
    resum = false;
  }).gateway-profile;

  # A pinned LLVM profile that is not a profile, its manifest's sha256 matching: unreadable.
  # (Not a slice of the real profile: whether a slice parses depends on where the cut falls,
  # which changes with every refresh.)
  pinned-llvm-profile-unreadable = (withEdited {
    name = "llvm-unreadable";
    kind = "llvm";
    edit = "printf 'this is not an llvm profile\\n' > gateway.proftext";
  }).gateway-profile;

  # The pinned LLVM profile's key names another rustc.
  pinned-llvm-profile-other-toolchain = (withEdited {
    name = "llvm-other-toolchain";
    kind = "llvm";
    edit = ''sed -i 's/"rustc": "rustc [^"]*"/"rustc": "rustc 1.94.0 (4a4ef493e 2026-03-02)"/' manifest.json'';
  }).gateway-profile;

  # The pinned LLVM profile's key names other codegen settings (a cargo feature).
  pinned-llvm-profile-other-codegen = (withEdited {
    name = "llvm-other-codegen";
    kind = "llvm";
    edit = ''sed -i 's/"features": \[\]/"features": ["mimalloc"]/' manifest.json'';
  }).gateway-profile;

  # The pinned BOLT profile's manifest names another llvm-bolt major.
  pinned-bolt-profile-other-toolchain = (withEdited {
    name = "bolt-other-toolchain";
    kind = "bolt";
    edit = ''sed -i 's/"llvm_bolt": "[^"]*"/"llvm_bolt": "21.1.8"/' manifest.json'';
  }).gateway-bolt-profile;

  # A pinned BOLT profile cut short in the middle of a line: corrupt.
  pinned-bolt-profile-corrupt = (withEdited {
    name = "bolt-corrupt";
    kind = "bolt";
    edit = "head -c 100001 gateway.fdata > x && mv x gateway.fdata";
  }).gateway-bolt-profile;

  # A pinned BOLT profile whose branches of one hot function (the gateway crate's function with
  # the most branch records, so that no rename of the sources moves the test off it) no longer fit
  # its code, as after an edit of it: llvm-bolt finds it stale.
  pinned-bolt-profile-stale-function = (withEdited {
    name = "bolt-stale-function";
    kind = "bolt";
    edit = ''
      ${hottestGatewayFunction}
      awk -v fn="$hot" '$2 == fn { $3 = "fffff" } { print }' gateway.fdata > x
      mv x gateway.fdata
    '';
  }).gateway-bolt-profile;

  # A pinned BOLT profile of a hot function this PGO binary does not have (as after a rename).
  pinned-bolt-profile-function-missing = (withEdited {
    name = "bolt-function-missing";
    kind = "bolt";
    edit = ''
      ${hottestGatewayFunction}
      awk -v fn="$hot" '$2 == fn { $2 = fn "_renamed" } $5 == fn { $5 = fn "_renamed" } { print }' \
        gateway.fdata > x
      mv x gateway.fdata
    '';
  }).gateway-bolt-profile;

  # A stale pinned LLVM profile of the same code: as if no dialect code or serde_json had run
  # (every counter of their functions zero; about 82% overlap with a fresh training). Valid and of this toolchain; the training check's overlap fails, naming the
  # refresh command.
  stale-llvm-profile = (withEdited {
    name = "llvm-stale";
    kind = "llvm";
    edit = ''
      awk 'BEGIN { name = ""; left = 0 }
           $0 == "# Func Hash:" { name = prev }
           left > 0 { left--; if (name ~ /dialect|serde_json/) { print 0; prev = $0; next } }
           prev == "# Num Counters:" { n = $0 }
           $0 == "# Counter Values:" { left = n }
           { print; prev = $0 }' gateway.proftext > x && mv x gateway.proftext
    '';
  }).gateway-training;

  # A stale pinned BOLT profile of this very PGO binary: the branches of the dialect code and of
  # serde_json gone (about a quarter of all counts: far below the threshold whatever the noise).
  stale-bolt-profile = (withEdited {
    name = "bolt-stale";
    kind = "bolt";
    edit = "grep -Ev '^1 [^ ]*(dialect|serde_json)' gateway.fdata > x && mv x gateway.fdata";
  }).gateway-bolt-training;

  # A training set with shapes removed: the refresh's LLVM training never starts, because the
  # coverage gate it depends on fails, naming each combination left cold.
  coverage-shapes-removed =
    (import ../offline/default.nix (args // { shapes = shapesWithoutSome; })).gateway-profile-fresh;

  # No code changed, but the training's hot path moved (the streaming shapes at a tenth of their
  # requests): the pinned profiles describe another workload, and both training checks fail on
  # the overlap, though neither the hash check nor the PGO build's warnings see anything.
  hot-path-moved-llvm = (import ../offline/default.nix (args // { shapes = shapesHotPathMoved; })).gateway-training;
  # The BOLT check on its own: in the chain it runs only after the LLVM check has passed.
  hot-path-moved-bolt = chain.stages.training-check {
    name = "gateway-bolt-training";
    kind = "bolt";
    binary = "gateway";
    instrumented = chain.gateway-bolt-instrumented;
    pinned = chain.gateway-bolt-profile;
    command = chain.stages.training { inherit (chain) trainer; shapes = shapesHotPathMoved; };
    engine = chain.pgo-engine;
    minOverlap = chain.thresholds.boltMinOverlap;
    inherit (chain) refreshCommand;
  };

  # A hot function of the gateway edited without refreshing the pinned profile: LLVM reports
  # its hash mismatch while the PGO stage builds, and the stage fails naming the refresh command.
  hot-function-edited-without-refresh =
    (import ../offline/default.nix (args // { src = gatewayFunctionEdited; })).gateway-pgo;

  # The same for a hot function of the patched hyper: its profile-use warnings are kept as the
  # gateway's are (a path crate's lints are not capped), so the PGO stage fails the same way.
  hyper-function-edited-without-refresh =
    (import ../offline/default.nix (args // { src = hyperFunctionEdited; })).gateway-pgo;

  # aarch64: BOLT's x86_64 runtime given for the aarch64 binary. The stage refuses it by the
  # runtime's ELF machine before BOLT links it in.
  aarch64-bolt-with-x86_64-runtime =
    (aarch64With { boltRuntimeLib = "/usr/lib/llvm-22/lib/libbolt_rt_instr.a"; }).stages.bolt-instrument {
      name = "gateway-bolt-instrumented";
      binary = "gateway";
      pgo = tinyAarch64;
      inherit (aarch64) versions;
    };

  # aarch64: no emulator. The toolchain check fails before any build, and so does the stage that
  # wraps a gateway for training, whatever binfmt_misc on the builder would do.
  aarch64-without-emulator = (aarch64With { emulator = "/nonexistent/qemu-aarch64-static"; }).versions;
  aarch64-training-without-emulator =
    (aarch64With { emulator = "/nonexistent/qemu-aarch64-static"; }).chain.runnable "gateway-instrumented" tinyAarch64;

  # aarch64: the pinned profiles of the other target (x86_64's) given to the aarch64 chain: the
  # profile stage refuses them by their key's target before the PGO build.
  aarch64-profile-of-other-target =
    (import ../offline/default.nix (aarch64Args // { pinned = chain.pinned; })).gateway-profile;

  # aarch64, with the aarch64 plain build (a 15-minute cross build: the aarch64 CI job): an
  # emulated training run of a binary without instrumentation leaves no profile.
  aarch64-training-without-profile = llvmCheckIn aarch64 {
    instrumented = aarch64.chain.runnable "gateway" aarch64.gateway;
    pinned = aarch64.gateway-profile-fresh;
  };
}
