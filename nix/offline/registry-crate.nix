# A published crate's source for the offline chain, as nix/offline/vendor-crate fetched it: checked
# in the sandbox against the checksums cargo recorded when it vendored the crate
# (.cargo-checksum.json: the .crate archive's sha256 and every file's), and the archive's against
# the checksum the repository's Cargo.lock pins. Fails closed, naming the stage and the file,
# when a file was changed, added or removed after vendoring, or the crate is not the pinned one.
# (The flake fetches the archive by that checksum itself.)
{
  toolchain,
  # Stage name (ripgrep-source).
  name,
  # The crate as vendored (a directory with .cargo-checksum.json).
  crate,
  # The crate's name, and the Cargo.lock that pins it by checksum.
  package,
  lock,
}:
toolchain.runStage {
  inherit name;
  script = ''
    cp -r ${crate} "$out"
    chmod -R u+w "$out"
    /usr/bin/python3 - "$out" ${lock} ${package} <<'CHECK' || fail "the ${package} source is not the crate ${lock} pins (see above)"
    import hashlib, json, os, sys, tomllib
    root, lock, package = sys.argv[1:]
    recorded = json.load(open(os.path.join(root, ".cargo-checksum.json")))
    pinned = [p for p in tomllib.load(open(lock, "rb"))["package"] if p["name"] == package and "checksum" in p]
    if len(pinned) != 1 or pinned[0]["checksum"] != recorded["package"]:
        sys.exit("the vendored %s's archive sha256 %s is not the one Cargo.lock pins (%s)"
                 % (package, recorded["package"], [p["checksum"] for p in pinned]))
    found = set()
    for dirpath, _, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            if rel != ".cargo-checksum.json":
                found.add(rel)
    if found != set(recorded["files"]):
        sys.exit("files added %s, removed %s since vendoring"
                 % (sorted(found - set(recorded["files"]))[:5], sorted(set(recorded["files"]) - found)[:5]))
    for rel, sha in sorted(recorded["files"].items()):
        if hashlib.sha256(open(os.path.join(root, rel), "rb").read()).hexdigest() != sha:
            sys.exit("%s changed since vendoring" % rel)
    print("%s %s: %d files as vendored, archive sha256 %s as Cargo.lock pins"
          % (package, pinned[0]["version"], len(found), recorded["package"]))
    CHECK
  '';
}
