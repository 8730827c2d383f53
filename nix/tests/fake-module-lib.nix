# A small module system with nixpkgs' semantics for what nix/nixos-module.nix and
# nix/tests/nixos-module.nix use, for evaluation tests on machines without nixpkgs (Nix 2.8):
#
#   evalModules { modules, specialArgs }   imports; options trees; `config` as a fixpoint;
#                                          a definition of an undeclared option is an error
#   mkOption, mkEnableOption, mkIf, mkOverride, mkDefault, literalExpression, optionals
#   types: str bool int float path package unspecified anything, listOf attrsOf nullOr either
#          oneOf, submodule (declared options with defaults + `freeformType` for the rest)
#
# What it mirrors, as nixpkgs' lib/modules.nix and lib/types.nix do it: a definition beats an
# option's default (the default takes part only when nothing else defines the option); of the
# definitions, only those with the highest priority (mkOverride/mkDefault) are merged; every
# definition is type-checked before the type merges them; `mkIf` is pushed down into attribute
# sets so that its condition is evaluated only at an option; a submodule's value is its own
# evaluation, where definitions of undeclared attributes go to `freeformType`. It is a fake:
# nix/tests/nixos-module.nix also runs against nixpkgs' real lib (`checks.<system>.nixos-module`,
# and `NIXPKGS_LIB=... nix/tests/flake-check`), which is what shows the two agree.
let
  inherit (builtins)
    all
    attrNames
    concatLists
    concatStringsSep
    elem
    filter
    foldl'
    head
    isAttrs
    isBool
    isFloat
    isFunction
    isInt
    isList
    isPath
    isString
    length
    listToAttrs
    map
    removeAttrs
    substring
    ;

  showLoc = loc: concatStringsSep "." loc;
  show =
    v:
    if isString v then
      ''"${v}"''
    else if isPath v then
      toString v
    else
      "a ${builtins.typeOf v}";

  kindOf = v: if isAttrs v then v._type or null else null;
  isOption = v: kindOf v == "option";

  # ---- definitions: priorities and conditions -------------------------------------------------

  defaultPriority = 100;
  optionDefaultPriority = 1500;

  # The values of definition `d` under attribute `name`, with d's conditions and priority pushed
  # down onto each of them (nixpkgs: pushDownProperties).
  under =
    name: d:
    let
      k = kindOf d;
    in
    if k == "if" then
      map (v: mkIf d.condition v) (under name d.content)
    else if k == "override" then
      map (v: mkOverride d.priority v) (under name d.content)
    else if isAttrs d && d ? ${name} then
      [ d.${name} ]
    else
      [ ];

  # Attribute names a definition sets (through its conditions, without evaluating them).
  namesOf =
    d:
    let
      k = kindOf d;
    in
    if k == "if" || k == "override" then namesOf d.content else if isAttrs d then attrNames d else [ ];

  # `{ priority; value; }` of a definition at an option, conditions evaluated (false: none).
  resolve =
    d:
    let
      k = kindOf d;
    in
    if k == "if" then
      (if d.condition then resolve d.content else [ ])
    else if k == "override" then
      map (r: r // { inherit (d) priority; }) (resolve d.content)
    else
      [
        {
          priority = defaultPriority;
          value = d;
        }
      ];

  evalOption =
    loc: opt: defs:
    let
      resolved = concatLists (map resolve defs);
      withDefault =
        if resolved != [ ] then
          resolved
        else if opt ? default then
          [
            {
              priority = optionDefaultPriority;
              value = opt.default;
            }
          ]
        else
          throw "fake-module-lib: the option `${showLoc loc}' is used but not defined";
      best = foldl' (m: r: if r.priority < m then r.priority else m) optionDefaultPriority withDefault;
      values = map (r: r.value) (filter (r: r.priority == best) withDefault);
      type = opt.type or types.unspecified;
      bad = filter (v: !(type.check v)) values;
    in
    if bad != [ ] then
      throw "fake-module-lib: a definition for option `${showLoc loc}' is not of type `${type.name}': ${show (head bad)}"
    else
      type.merge loc values;

  # The config of an options tree from a list of definitions (attribute sets, maybe conditional).
  evalTree =
    loc: opts: defs:
    let
      unknown = filter (n: !(opts ? ${n})) (concatLists (map namesOf defs));
    in
    if unknown != [ ] then
      throw "fake-module-lib: the option `${showLoc (loc ++ [ (head unknown) ])}' does not exist"
    else
      listToAttrs (
        map (name: {
          inherit name;
          value =
            let
              sub = concatLists (map (under name) defs);
            in
            if isOption opts.${name} then
              evalOption (loc ++ [ name ]) opts.${name} sub
            else
              evalTree (loc ++ [ name ]) opts.${name} sub;
        }) (attrNames opts)
      );

  mergeTrees =
    a: b:
    a
    // listToAttrs (
      map (name: {
        inherit name;
        value =
          if a ? ${name} && !(isOption a.${name}) && !(isOption b.${name}) then
            mergeTrees a.${name} b.${name}
          else if a ? ${name} then
            throw "fake-module-lib: the option `${name}' is declared twice"
          else
            b.${name};
      }) (attrNames b)
    );

  # ---- modules ----------------------------------------------------------------------------------

  structuralKeys = [
    "options"
    "config"
    "imports"
    "freeformType"
  ];

  evalModules =
    {
      modules,
      specialArgs ? { },
      # Where this evaluation sits (a submodule's option), for messages.
      prefix ? [ ],
    }:
    let
      args = specialArgs // {
        inherit lib config options;
      };
      load = m: if isPath m || isString m then import m else m;
      call = m: if isFunction m then m args else m;
      expand =
        m:
        let
          v = call (load m);
          # Without `options` and `config` keys, everything but the structural keys is config.
          own = {
            options = v.options or { };
            config = if v ? options || v ? config then v.config or { } else removeAttrs v structuralKeys;
            freeformType = v.freeformType or null;
          };
        in
        [ own ] ++ concatLists (map expand (v.imports or [ ]));
      flat = concatLists (map expand modules);
      options = foldl' mergeTrees { } (map (m: m.options) flat);
      freeformTypes = filter (t: t != null) (map (m: m.freeformType) flat);
      defs = map (m: m.config) flat;
      declared = evalTree prefix options (map (d: removeAttrs' (free d) d) defs);
      # With a freeform type, what no option declares goes to that type, merged across modules.
      free = d: if freeformTypes == [ ] then [ ] else filter (n: !(options ? ${n})) (namesOf d);
      removeAttrs' = names: d: if names == [ ] then d else removeAttrs d names;
      leftovers = filter (d: d != { }) (map (d: listToAttrs (map (n: { name = n; value = d.${n}; }) (free d))) defs);
      freeform = if leftovers == [ ] then { } else (head freeformTypes).merge prefix leftovers;
      config = freeform // declared;
    in
    {
      inherit config options;
    };

  # ---- options ----------------------------------------------------------------------------------

  mkOption = o: o // { _type = "option"; };
  mkEnableOption =
    name:
    mkOption {
      type = types.bool;
      default = false;
      example = true;
      description = "Whether to enable ${name}.";
    };
  mkIf = condition: content: {
    _type = "if";
    inherit condition content;
  };
  mkOverride = priority: content: {
    _type = "override";
    inherit priority content;
  };
  mkDefault = mkOverride 1000;
  literalExpression = text: {
    _type = "literalExpression";
    inherit text;
  };
  optionals = c: l: if c then l else [ ];

  # ---- types --------------------------------------------------------------------------------------

  mkType = name: check: merge: {
    _type = "option-type";
    inherit name check merge;
  };

  # One value; several definitions must agree (nixpkgs: mergeEqualOption).
  mergeEqual =
    loc: values:
    if all (v: v == head values) values then
      head values
    else
      throw "fake-module-lib: the option `${showLoc loc}' has conflicting definitions";

  single = name: check: mkType name check mergeEqual;

  # Attribute sets merge attribute by attribute; lists concatenate; anything else must agree.
  mergeAny =
    loc: values:
    if all isAttrs values && !(any (v: v ? outPath) values) then
      mergeAttrs (_: types.anything) loc values
    else if all isList values then
      concatLists values
    else
      mergeEqual loc values;
  any = f: l: foldl' (acc: x: acc || f x) false l;

  mergeAttrs =
    elemTypeOf: loc: values:
    let
      names = foldl' (acc: v: acc ++ filter (n: !(elem n acc)) (attrNames v)) [ ] values;
    in
    listToAttrs (
      map (name: {
        inherit name;
        value =
          let
            t = elemTypeOf name;
          in
          evalOption (loc ++ [ name ]) { type = t; } (concatLists (map (under name) values));
      }) names
    );

  types = rec {
    str = single "string" isString;
    bool = single "boolean" isBool;
    int = single "signed integer" isInt;
    float = single "floating point number" isFloat;
    path = single "path" (v: isPath v || (isString v && substring 0 1 v == "/") || (isAttrs v && v ? outPath));
    package = single "package" (v: isAttrs v && (v.type or null) == "derivation");
    anything = mkType "anything" (_: true) mergeAny;
    unspecified = mkType "unspecified value" (_: true) mergeAny;
    listOf =
      t:
      mkType "list of ${t.name}" isList (
        loc: values:
        map (v: evalOption loc { type = t; } [ v ]) (concatLists values)
      );
    attrsOf = t: mkType "attribute set of ${t.name}" isAttrs (mergeAttrs (_: t));
    nullOr =
      t:
      mkType "null or ${t.name}" (v: v == null || t.check v) (
        loc: values:
        if all (v: v == null) values then
          null
        else if any (v: v == null) values then
          throw "fake-module-lib: the option `${showLoc loc}' is defined both null and not null"
        else
          t.merge loc values
      );
    either =
      a: b:
      mkType "${a.name} or ${b.name}" (v: a.check v || b.check v) (
        loc: values:
        if all a.check values then
          a.merge loc values
        else if all b.check values then
          b.merge loc values
        else
          throw "fake-module-lib: the option `${showLoc loc}' mixes ${a.name} and ${b.name}"
      );
    oneOf = ts: foldl' either (head ts) (builtins.tail ts);
    submodule =
      module:
      mkType "submodule" (v: isAttrs v || isFunction v) (
        loc: values:
        (evalModules {
          modules = [ module ] ++ values;
          prefix = loc;
        }).config
      );
  };

  lib = {
    inherit
      evalModules
      mkOption
      mkEnableOption
      mkIf
      mkOverride
      mkDefault
      literalExpression
      optionals
      types
      ;
  };
in
lib
