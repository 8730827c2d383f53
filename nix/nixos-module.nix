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
      type = json.type;
      default = {
        listen = "127.0.0.1:8080";
      };
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
        Put no secrets here: name environment variables with `api_key_env` and provide them with
        `environmentFiles`.
      '';
    };

    configFile = lib.mkOption {
      type = lib.types.nullOr lib.types.path;
      default = null;
      description = "A configuration file to use instead of `settings`.";
    };

    environmentFiles = lib.mkOption {
      type = lib.types.listOf lib.types.path;
      default = [ ];
      example = [ "/run/secrets/llm-gateway.env" ];
      description = ''
        systemd EnvironmentFile= entries holding the upstream API keys (`NAME=value` lines). Read by
        systemd as root before privileges are dropped; keep them mode 0400 owned by root.
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
    systemd.services.llm-gateway = {
      description = "LLM gateway (PGO+BOLT build)";
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ];
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
