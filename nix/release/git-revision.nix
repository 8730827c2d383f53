# The commit HEAD names in the repository at ROOT, read from its .git directory (a ref's loose
# file, or packed-refs), for the release's `revision` when nix/offline/build is not given
# `--argstr releaseRevision REV`. Fails evaluation, saying so, where there is no .git to read.
root:
let
  git = root + "/.git";
  read = p: builtins.replaceStrings [ "\n" ] [ "" ] (builtins.readFile p);
  head = if builtins.pathExists (git + "/HEAD") then read (git + "/HEAD")
    else throw "nix/release: no .git/HEAD under the repository: pass --argstr releaseRevision REV";
  ref = builtins.match "ref: (.*)" head;
  packed = builtins.filter (l: builtins.isString l && builtins.match "[0-9a-f]{40} .*" l != null)
    (builtins.split "\n" (if builtins.pathExists (git + "/packed-refs") then builtins.readFile (git + "/packed-refs") else ""));
  fromPacked = name:
    let hits = builtins.filter (l: builtins.match "[0-9a-f]{40} ${name}" l != null) packed;
    in if hits == [ ] then throw "nix/release: ${name} is neither a loose ref nor in packed-refs: pass --argstr releaseRevision REV"
       else builtins.substring 0 40 (builtins.head hits);
in
if ref == null then head
else if builtins.pathExists (git + "/${builtins.head ref}") then read (git + "/${builtins.head ref}")
else fromPacked (builtins.head ref)
