# Entry point of the offline provider (driven by nix/offline/build): the whole stage chain with
# Debian's LLVM/BOLT and the host rustup toolchain, evaluable by Nix 2.8 without nixpkgs.
{
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
}:
let
  root = ../..;

  # Only what `cargo build` of the binaries needs (the workspace crates and the patched
  # dependencies they build), so that editing docs, shapes, Nix code or the
  # crates' tests, examples, fuzz targets and READMEs rebuilds no binary. `without` names a member
  # whose code is left out but for its manifest (cargo loads every member's; offline.nix gives a
  # member without code a stub target).
  workspaceSource =
    { name, without ? null }:
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
        (rel == "Cargo.toml" || rel == "Cargo.lock" || top == "gateway" || top == "trainer"
          # Patched dependencies (third_party/README.md).
          || top == "third_party")
        && !(builtins.elem second [ "tests" "examples" "fuzz" "target" "README.md" ])
        && !(top == without && rel != without && second != "Cargo.toml")
        && builtins.match ".*\\.py[co]?" base == null;
    };
  cargoSource = workspaceSource { name = "gateway-workspace-source"; };
  # The gateway's builds do not compile the trainer: editing it rebuilds neither the plain nor the
  # instrumented build. The stages that run the trainer are rebuilt (its build, the training runs,
  # the profile stages that verify with it), and so is the PGO build, which reads the LLVM profile
  # stage's output.
  gatewaySource = workspaceSource {
    name = "gateway-build-source";
    without = "trainer";
  };

  toolchain = import ../toolchains/offline.nix ({
    inherit rustToolchain rustRelease;
    src = if src == null then cargoSource else src;
    packageSrc = package: if src != null then src else if package == "gateway" then gatewaySource else cargoSource;
    vendor = builtins.path { name = "cargo-vendor"; path = vendorDir; };
  } // toolOverrides);
in
import ../pipeline.nix {
  inherit toolchain instrumentedFatLto;
  pinned =
    if pinned != null then
      pinned
    else
      import ../pinned-profiles.nix {
        profiles = root + "/profiles";
        inherit (toolchain) target rustRelease;
      };
  shapes = if shapes != null then shapes else builtins.path { name = "shapes"; path = root + "/shapes"; };
  refreshCommand = "nix/offline/refresh-profiles";
}
