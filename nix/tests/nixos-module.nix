# The NixOS module (nix/nixos-module.nix) evaluated by a module system: `lib.evalModules` with
# the module, stand-ins for the two NixOS options it sets (`systemd.services`, `assertions`) and
# a user's configuration. Returns a list of `{ name; ok; }`, one per assertion.
#
#   lib     nixpkgs' lib (the flake's `checks.<system>.nixos-module`; `NIXPKGS_LIB=<nixpkgs>/lib
#           nix/tests/flake-check` with Nix 2.8), or the fake of nix/tests/fake-module-lib.nix
#           (nix/tests/flake-eval.nix, which has no nixpkgs)
#   pkgs    provides `formats.json`; null: a stand-in with the JSON type nixpkgs' formats.json
#           builds from `lib.types`, whose `generate` writes the file with builtins.toFile
#   module  the module under test: nix/nixos-module.nix, or the flake's `nixosModules.default`
#           (which imports it) with `defaultPackage` the package it defaults to
{
  lib,
  pkgs ? null,
  module ? ../nixos-module.nix,
  defaultPackage ? null,
}:
let
  inherit (builtins)
    all
    elem
    filter
    fromJSON
    isString
    map
    readFile
    ;

  standInPkgs = {
    formats.json =
      { }:
      {
        type =
          let
            t = lib.types;
            valueType =
              t.nullOr (
                t.oneOf [
                  t.bool
                  t.int
                  t.float
                  t.str
                  t.path
                  (t.attrsOf valueType)
                  (t.listOf valueType)
                ]
              )
              // {
                description = "JSON value";
              };
          in
          valueType;
        generate = name: value: builtins.toFile name (builtins.toJSON value);
      };
  };
  usedPkgs = if pkgs == null then standInPkgs else pkgs;

  # The NixOS options the module sets, declared as loosely as NixOS' own allow here.
  nixosStandIns =
    { lib, ... }:
    {
      options.systemd.services = lib.mkOption {
        type = lib.types.attrsOf lib.types.anything;
        default = { };
      };
      options.assertions = lib.mkOption {
        type = lib.types.listOf lib.types.unspecified;
        default = [ ];
      };
    };

  gateway = derivation {
    name = "fake-gateway";
    system = "x86_64-linux";
    builder = "/bin/sh";
    args = [
      "-c"
      "exit 1"
    ];
  };

  eval =
    user:
    (lib.evalModules {
      specialArgs.pkgs = usedPkgs;
      modules = [
        module
        nixosStandIns
        { services.llm-gateway = user; }
      ];
    }).config;

  enabled = extra: eval ({ enable = true; package = gateway; } // extra);

  # A user who sets only providers and models (no `listen`).
  partial = enabled {
    settings = {
      providers.up-openai = {
        kind = "openai";
        base_url = "https://api.openai.com";
        api_key_env = "UPSTREAM_OPENAI_KEY";
      };
      models."gpt-4o-mini" = {
        provider = "up-openai";
        model = "gpt-4o-mini";
      };
    };
    environmentFiles = [
      "/run/secrets/llm-gateway.env"
      "-/run/x.env"
    ];
  };
  svc = partial.systemd.services.llm-gateway;
  sc = svc.serviceConfig;
  configFile = builtins.head svc.restartTriggers;

  failedAssertions = cfg: map (a: a.message) (filter (a: !a.assertion) cfg.assertions);
  refused =
    entry: needle:
    let
      failed = failedAssertions (enabled { environmentFiles = [ entry ]; });
    in
    failed != [ ] && all (m: hasInfix needle m && hasInfix "services.llm-gateway.environmentFiles" m) failed;
  # Literal substring test (no regular expressions: store paths and messages are matched as is).
  hasInfix =
    needle: hay:
    let
      n = builtins.stringLength needle;
    in
    builtins.any (i: builtins.substring i n hay == needle) (
      builtins.genList (i: i) (builtins.stringLength hay - n + 1)
    );

  # An evaluation error the module system throws (a type error, a failed definition) fails the
  # one check rather than the whole test.
  check = name: ok: {
    name = "nixos module: ${name}";
    ok =
      let
        r = builtins.tryEval ok;
      in
      r.success && r.value;
  };
in
[
  (check "partial settings (providers, models) keep the default listen" (
    partial.services.llm-gateway.settings.listen or null == "127.0.0.1:8080"
    && partial.services.llm-gateway.settings.providers.up-openai.kind == "openai"
    && partial.services.llm-gateway.settings.models."gpt-4o-mini".model == "gpt-4o-mini"
  ))
  (check "the generated config file carries listen, providers and models" (
    # Only a toFile-generated config can be read back at evaluation time.
    !(isString configFile && builtins.substring 0 1 configFile == "/")
    || (
      let
        json = fromJSON (readFile configFile);
      in
      json.listen or null == "127.0.0.1:8080" && json ? providers && json ? models
    )
  ))
  (check "a user's listen overrides the default" (
    (enabled { settings.listen = "0.0.0.0:8080"; }).services.llm-gateway.settings.listen == "0.0.0.0:8080"
  ))
  (check "no settings at all: listen alone" ((enabled { }).services.llm-gateway.settings == { listen = "127.0.0.1:8080"; }))
  (check "environmentFiles: absolute paths outside the store, `-` prefix allowed, passed to EnvironmentFile" (
    failedAssertions partial == [ ] && sc.EnvironmentFile == [ "/run/secrets/llm-gateway.env" "-/run/x.env" ]
  ))
  (check "environmentFiles: a store path is refused, naming the store" (
    refused "${builtins.storeDir}/00000000000000000000000000000000-keys.env" "Nix store"
    && refused "-${builtins.storeDir}/00000000000000000000000000000000-keys.env" "Nix store"
  ))
  (check "environmentFiles: a path literal is refused (it would be copied into the store)" (
    refused ./nixos-module.nix "path literal"
  ))
  (check "environmentFiles: a relative path is refused" (refused "keys.env" "not an absolute path"))
  (check "hardened service (DynamicUser, ProtectSystem=strict, no capabilities)" (
    sc.DynamicUser == true
    && sc.ProtectSystem == "strict"
    && sc.ProtectHome == true
    && sc.NoNewPrivileges == true
    && sc.PrivateDevices == true
    && sc.CapabilityBoundingSet == ""
    && sc.MemoryDenyWriteExecute == true
    && elem "@system-service" sc.SystemCallFilter
  ))
  (check "validates the config, then serves it; restartTriggers is that config" (
    hasInfix "${gateway}/bin/gateway validate --config ${configFile}" sc.ExecStartPre
    && hasInfix "${gateway}/bin/gateway --config ${configFile}" sc.ExecStart
  ))
  (check "package defaults to ${if defaultPackage == null then "nothing" else defaultPackage.name}; a user's package wins" (
    if defaultPackage == null then
      !(builtins.tryEval (eval { enable = true; }).services.llm-gateway.package).success
    else
      (eval { enable = true; }).services.llm-gateway.package.drvPath == defaultPackage.drvPath
      && partial.services.llm-gateway.package.drvPath == gateway.drvPath
  ))
  (check "disabled means no service and no assertions" (
    let
      off = eval { enable = false; };
    in
    off.systemd.services == { } && off.assertions == [ ]
  ))
]
