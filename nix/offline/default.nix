# Entry point of the offline provider (driven by nix/offline/build): the whole stage chain with
# Debian's LLVM/BOLT and the host rustup toolchain, evaluable by Nix 2.8 without nixpkgs.
args@{
  # Absolute path of the rustup toolchain (see nix/offline/build, which finds it).
  rustToolchain,
  # Its Rust release (`rustc -vV`'s release: "1.95.0"): the pinned profiles are looked up by it.
  rustRelease ? (import ../rust-release.nix).release,
  # Absolute path of the `cargo vendor` directory for Cargo.lock.
  vendorDir,
  # Overrides of the provider's tool paths (attribute names of nix/toolchains/offline.nix).
  toolOverrides ? { },
  # The cargo workspace source; null: the repository's, filtered as below (compositions such as
  # nix/tests/fail-closed.nix pass a patched one).
  src ? null,
  # The pinned profiles { llvm, bolt, where } (store paths or null); null: the repository's
  # profiles/ (compositions pass broken or missing ones).
  pinned ? null,
  # The shapes directory (a store path); null: the repository's shapes/ (compositions pass one
  # with a shape removed).
  shapes ? null,
  # The instrumented build linked with fat LTO (nix/pipeline.nix), for bench/chain-cost.
  instrumentedFatLto ? false,
  # The target of the chain: the builder's own, or aarch64-unknown-linux-gnu, built with the
  # cross linker and trained under qemu-user (crossTools below; nix/offline/aarch64-setup installs
  # them). The top level also has the aarch64 chain as `aarch64` and its artifact as
  # `gateway-pgo-bolt-aarch64`.
  target ? "x86_64-unknown-linux-gnu",
  # Absolute path of nix/offline/vendor-crate's output for the examples (examples/NAME/ ->
  # EXAMPLES/NAME/{crate,vendor}); nix/offline/build passes it for the `examples.*` outputs.
  examplesVendorDir ? null,
  # The release's source revision (a git commit) and the source's URL, for the release channels
  # (nix/release/, docs/release.md); null: HEAD of the repository's .git / no `source` label.
  releaseRevision ? null,
  releaseSourceUrl ? null,
}:
let
  root = ../..;

  # Only what `cargo build` of the binaries needs (the workspace crates and the patched
  # dependencies they build), so that editing docs, shapes, Nix code or the
  # crates' tests, examples, fuzz targets and READMEs rebuilds no binary. `without` names the
  # members whose code is left out but for their manifests (cargo loads every member's; offline.nix
  # gives a member without code a stub target).
  workspaceSource =
    { name, without ? [ ] }:
    builtins.path {
      inherit name;
      path = root;
      filter = path: type:
        let
          rel = builtins.substring (builtins.stringLength (toString root) + 1) (-1) (toString path);
          parts = builtins.filter builtins.isString (builtins.split "/" rel);
          top = builtins.head parts;
          second = if builtins.length parts > 1 then builtins.elemAt parts 1 else "";
          base = baseNameOf path;
        in
        (rel == "Cargo.toml" || rel == "Cargo.lock" || builtins.elem top [ "gateway" "trainer" "pgo-engine" ]
          # Patched dependencies (third_party/README.md).
          || top == "third_party")
        && !(builtins.elem second [ "tests" "examples" "fuzz" "target" "README.md" ])
        && !(builtins.elem top without && rel != top && second != "Cargo.toml")
        && builtins.match ".*\\.py[co]?" base == null;
    };
  cargoSource = workspaceSource { name = "gateway-workspace-source"; };
  # Each build compiles only its package's code: the gateway's builds leave out the trainer's and
  # the engine's (editing them rebuilds neither the plain nor the instrumented build; the stages
  # that run them are rebuilt, and so is the PGO build, which reads the LLVM profile stage's
  # output), the trainer's the gateway's, the engine's both.
  gatewaySource = workspaceSource {
    name = "gateway-build-source";
    without = [ "trainer" "pgo-engine" ];
  };
  engineSource = workspaceSource {
    name = "pgo-engine-build-source";
    without = [ "gateway" "trainer" ];
  };
  sourceOf = {
    gateway = gatewaySource;
    trainer = workspaceSource {
      name = "trainer-build-source";
      without = [ "gateway" ];
    };
    pgo-engine = engineSource;
  };

  # What a cross target needs besides the toolchain (nix/offline/aarch64-setup installs each): its
  # linker, the emulator that runs its binaries here and BOLT's instrumentation runtime of its
  # architecture (Debian's libbolt-22-dev:arm64, unpacked under /opt/bolt-aarch64: the x86_64
  # runtime cannot be linked into an aarch64 binary). With only the cross libc installed (no
  # libc6:arm64), qemu gets the guest's libraries from the cross sysroot; with libc6:arm64 it must
  # not (threaded programs hang: docs/aarch64.md).
  crossTools = {
    "aarch64-unknown-linux-gnu" = {
      crossLinker = "/usr/bin/aarch64-linux-gnu-gcc";
      emulator =
        "/usr/bin/qemu-aarch64-static"
        + (if builtins.pathExists /lib/ld-linux-aarch64.so.1 then "" else " -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib");
      boltRuntimeLib = "/opt/bolt-aarch64/usr/lib/llvm-22/lib/libbolt_rt_instr.a";
    };
  };

  # The workspace's `cargo vendor` directory in the store: the toolchain's crate source, and the
  # release notices' licence files.
  vendor = builtins.path { name = "cargo-vendor"; path = vendorDir; };

  toolchain = import ../toolchains/offline.nix ({
    inherit rustToolchain rustRelease target;
    src = if src == null then cargoSource else src;
    packageSrc = package: if src != null then src else sourceOf.${package} or cargoSource;
    inherit vendor;
  } // (crossTools.${target} or { }) // toolOverrides);

  chain = import ../pipeline.nix {
  inherit toolchain instrumentedFatLto;
  pinned =
    if pinned != null then
      pinned
    else
      import ../lib/pinned-profiles.nix {
        profiles = root + "/profiles";
        binary = "gateway";
        inherit (toolchain) target rustRelease;
      };
  shapes = if shapes != null then shapes else builtins.path { name = "shapes"; path = root + "/shapes"; };
  refreshCommand =
    if target == "x86_64-unknown-linux-gnu" then "nix/offline/refresh-profiles" else "nix/offline/refresh-profiles --aarch64";
  };

  # The aarch64 chain beside the builder's own (same arguments, another target).
  aarch64 = import ./default.nix (args // { target = "aarch64-unknown-linux-gnu"; });

  # The library on this provider (docs/library.md): `lib.buildChain { ... }` builds any crate's
  # chain, for this target or another (`target`), with the engine this repository builds for it.
  chainFor = t: if t == target then chain else import ./default.nix (args // { target = t; });
  lib = import ../lib {
    toolchainFor = t: (chainFor t).toolchain;
    engineFor = t: (chainFor t).pgo-engine;
    defaultTarget = target;
  };

  # The examples (examples/NAME/default.nix), each a published crate's chain with the crate as
  # nix/offline/vendor-crate fetched it, checked here against the checksum its Cargo.lock pins.
  fetched =
    name:
    let
      dir =
        if examplesVendorDir == null then
          throw "examples.${name}: no examplesVendorDir (nix/offline/build passes it for examples.* outputs)"
        else
          "${examplesVendorDir}/${name}";
      package =
        (builtins.fromTOML (builtins.readFile (root + "/examples/${name}/Cargo.toml"))).package.metadata.chain.crate;
    in
    {
      src = import ./registry-crate.nix {
        inherit toolchain package;
        name = "${package}-source";
        crate = builtins.path { name = "${package}-crate"; path = "${dir}/crate"; };
        lock = root + "/examples/${name}/Cargo.lock";
      };
      cargoToml = /. + "${dir}/crate/Cargo.toml";
      vendor = builtins.path { name = "${package}-vendor"; path = "${dir}/vendor"; };
    };
  examples = {
    ripgrep = import ../../examples/ripgrep ({ inherit lib; } // fetched "ripgrep");
  };

  # The template's crate (templates/default), built by this provider: the twin of what
  # `nix flake init -t` gives.
  templates.default = import ../../templates/default/chain.nix {
    inherit lib;
    src = builtins.path {
      name = "wordfreq-source";
      path = root + "/templates/default";
      filter = path: type:
        let rel = builtins.substring (builtins.stringLength (toString root) + 19) (-1) (toString path);
        in builtins.elem rel [ "Cargo.toml" "Cargo.lock" "src" ] || builtins.match "src/.*" rel != null;
    };
    refreshCommand = "nix/offline/refresh-profiles --chain templates.default";
    profilesLocation = "templates/default/profiles";
  };

  # The release channels (nix/release/, docs/release.md): this target's tarball and OCI image of
  # gateway-pgo-bolt (`release-target`), and at the top level the release directory of them all,
  # with SHA256SUMS (`release`; `release-multiarch` with the aarch64 chain's as well).
  release-target = import ../release/target.nix {
    inherit toolchain;
    artifact = chain.gateway-pgo-bolt;
    notices = import ../release/notices.nix {
      inherit toolchain rustToolchain;
      inherit vendor;
      src = cargoSource;
    };
    exampleConfig = root + "/examples/gateway.json";
    version = (builtins.fromTOML (builtins.readFile (root + "/Cargo.toml"))).workspace.package.version;
    revision = if releaseRevision != null then releaseRevision else import ../release/git-revision.nix root;
    sourceUrl = releaseSourceUrl;
  };
  releaseOf = targets: import ../release/dist.nix {
    inherit toolchain targets;
    engine = chain.pgo-engine;
  };

  extras = { inherit lib examples templates release-target; };
in
if target == "x86_64-unknown-linux-gnu" then
  chain // extras // {
    inherit aarch64;
    gateway-pgo-bolt-aarch64 = aarch64.gateway-pgo-bolt;
    release = releaseOf [ release-target ];
    release-multiarch = releaseOf [ release-target aarch64.release-target ];
  }
else
  chain // extras
