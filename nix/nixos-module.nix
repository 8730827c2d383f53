# NixOS module: the gateway as a hardened systemd service.
#
#   services.llm-gateway = {
#     enable = true;
#     settings = { listen = "127.0.0.1:8080"; providers = { ... }; models = { ... }; };
#     environmentFiles = [ "/run/secrets/llm-gateway.env" ];   # UPSTREAM_OPENAI_KEY=... lines
#   };
#
# The flake's `nixosModules.default` imports this file and sets `package` to its gateway-pgo-bolt.
# API keys never enter the Nix store: the config names environment variables (`api_key_env`), and
# systemd reads `environmentFiles` as root before it drops to the dynamic user, so they can stay
# root-only (0400).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.services.llm-gateway;
  json = pkgs.formats.json { };

  configFile =
    if cfg.configFile != null then cfg.configFile else json.generate "llm-gateway.json" cfg.settings;

  exe = "${cfg.package}/bin/gateway";

  # Why an `environmentFiles` entry is refused (null when it is fine). `toString` of a path
  # literal gives its path without copying the file into the store.
  environmentFileProblem =
    entry:
    let
      optional = builtins.isString entry && builtins.substring 0 1 entry == "-";
      path = if optional then builtins.substring 1 (-1) entry else entry;
      storePrefix = builtins.storeDir + "/";
    in
    if builtins.isPath entry then
      "${toString entry} is a path literal, which Nix copies into the world-readable store; give the absolute path of a root-only file outside the store as a string"
    else if builtins.substring 0 1 path != "/" then
      "\"${entry}\" is not an absolute path (optionally prefixed with `-`)"
    else if builtins.substring 0 (builtins.stringLength storePrefix) path == storePrefix then
      "\"${entry}\" is in the Nix store, which every local user can read; keep API keys in a root-only file outside it (e.g. /run/secrets/llm-gateway.env)"
    else
      null;
in
{
  options.services.llm-gateway = {
    enable = lib.mkEnableOption "the LLM gateway";

    package = lib.mkOption {
      type = lib.types.package;
      description = ''
        Package providing bin/gateway. The flake's module defaults it to its gateway-pgo-bolt
        (the PGO+BOLT build whose proof marker is share/gateway/proof.json).
      '';
    };

    settings = lib.mkOption {
      # A submodule, not a plain JSON value with a default: a default is dropped as a whole as
      # soon as any part of the option is set, while a sub-option keeps its own default next to
      # whatever the user sets (the rest of the config is free-form JSON).
      type = lib.types.submodule {
        freeformType = json.type;
        options.listen = lib.mkOption {
          type = lib.types.str;
          default = "127.0.0.1:8080";
          description = "Address and port the gateway listens on.";
        };
      };
      default = { };
      example = lib.literalExpression ''
        {
          listen = "127.0.0.1:8080";
          providers.up-openai = {
            kind = "openai";
            base_url = "https://api.openai.com";
            api_key_env = "UPSTREAM_OPENAI_KEY";
          };
          models."gpt-4o-mini" = { provider = "up-openai"; model = "gpt-4o-mini"; };
        }
      '';
      description = ''
        Gateway configuration (docs/contracts.md, "Gateway config"), written to the store as JSON.
        `listen` defaults to 127.0.0.1:8080 whatever else is set. Put no secrets here: name
        environment variables with `api_key_env` and provide them with `environmentFiles`.
      '';
    };

    configFile = lib.mkOption {
      type = lib.types.nullOr lib.types.path;
      default = null;
      description = ''
        A configuration file to use instead of `settings`. A path literal (`./gateway.json`) is
        copied into the Nix store, and a changed file restarts the service on the next switch. An
        absolute path string outside the store (`"/etc/llm-gateway.json"`) is read when the
        service starts, and only that string is tracked: editing the file restarts nothing, so
        restart the service yourself (`systemctl restart llm-gateway`).
      '';
    };

    environmentFiles = lib.mkOption {
      # Strings, not `types.path`: a path literal would be copied into the world-readable store.
      # A path literal still type-checks (`either`), so that the assertion below can say why it
      # is refused instead of a bare "not of type string".
      type = lib.types.listOf (lib.types.either lib.types.str lib.types.path);
      default = [ ];
      example = [
        "/run/secrets/llm-gateway.env"
        "-/etc/llm-gateway/extra.env"
      ];
      description = ''
        systemd EnvironmentFile= entries holding the upstream API keys (`NAME=value` lines):
        absolute paths, as strings, of files outside the Nix store (the store is readable by
        every local user; a path literal or a store path is refused). A leading `-` makes a file
        optional: systemd skips it when it does not exist. Read by systemd as root before
        privileges are dropped; keep them mode 0400 owned by root. Their contents are not
        tracked: after changing one, restart the service.
      '';
    };

    bindPrivilegedPort = lib.mkOption {
      type = lib.types.bool;
      default = false;
      description = "Grant CAP_NET_BIND_SERVICE, for a `listen` port below 1024.";
    };

    stopTimeoutSec = lib.mkOption {
      type = lib.types.int;
      default = 30;
      description = "How long systemd waits after SIGTERM for in-flight requests to finish.";
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = map (
      entry:
      let
        problem = environmentFileProblem entry;
      in
      {
        assertion = problem == null;
        message = "services.llm-gateway.environmentFiles: ${problem}";
      }
    ) cfg.environmentFiles;

    systemd.services.llm-gateway = {
      description = "LLM gateway (PGO+BOLT build)";
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ];
      # A store path (settings, a path literal) changes with the file's contents; an absolute
      # path string outside the store does not (see `configFile`).
      restartTriggers = [ configFile ];

      serviceConfig = {
        # Refuse to start on a config the gateway itself rejects (prints every error with its path).
        ExecStartPre = "${exe} validate --config ${configFile}";
        ExecStart = "${exe} --config ${configFile}";
        EnvironmentFile = cfg.environmentFiles;

        # SIGTERM drains in-flight requests and exits 0 (docs/contracts.md).
        KillSignal = "SIGTERM";
        KillMode = "mixed";
        TimeoutStopSec = cfg.stopTimeoutSec;
        Restart = "on-failure";
        RestartSec = 2;

        # Identity and filesystem.
        DynamicUser = true;
        ProtectSystem = "strict";
        ProtectHome = true;
        PrivateTmp = true;
        PrivateDevices = true;
        PrivateUsers = !cfg.bindPrivilegedPort;
        UMask = "0077";
        RemoveIPC = true;

        # Privileges.
        NoNewPrivileges = true;
        CapabilityBoundingSet = if cfg.bindPrivilegedPort then [ "CAP_NET_BIND_SERVICE" ] else "";
        AmbientCapabilities = lib.optionals cfg.bindPrivilegedPort [ "CAP_NET_BIND_SERVICE" ];
        RestrictSUIDSGID = true;
        LockPersonality = true;
        MemoryDenyWriteExecute = true;
        RestrictRealtime = true;
        RestrictNamespaces = true;

        # Kernel and host.
        ProtectKernelTunables = true;
        ProtectKernelModules = true;
        ProtectKernelLogs = true;
        ProtectControlGroups = true;
        ProtectClock = true;
        ProtectHostname = true;
        ProtectProc = "invisible";
        ProcSubset = "pid";

        # Network: IP sockets for clients and upstreams, unix for the journal.
        RestrictAddressFamilies = [
          "AF_INET"
          "AF_INET6"
          "AF_UNIX"
        ];

        # System calls.
        SystemCallArchitectures = "native";
        SystemCallFilter = [
          "@system-service"
          "~@privileged"
        ];
        SystemCallErrorNumber = "EPERM";

        LimitNOFILE = 65536;
      };
    };
  };
}
