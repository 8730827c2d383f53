#!/usr/bin/env python3
"""source_digest.py COMMIT [GIT_DIR]: the pinned manifests' source digest of the gateway's chain
(`sourceInclude` in nix/pipeline.nix; the old refresh rule's input) computed from git objects: sha256 of the sorted
"<sha256 of file>  <path>" lines of every file under the listed paths."""
import hashlib
import subprocess
import sys

SOURCE_FILES = ["Cargo.toml", "Cargo.lock", "gateway/Cargo.toml", "gateway/src",
                "third_party/hyper/Cargo.toml", "third_party/hyper/src"]
commit = sys.argv[1]
git = ["git"] + (["-C", sys.argv[2]] if len(sys.argv) > 2 else [])
out = subprocess.run(git + ["ls-tree", "-r", "-z", commit, "--"] + SOURCE_FILES,
                     check=True, capture_output=True).stdout
ents = []
for ent in out.split(b"\0"):
    if ent:
        meta, path = ent.split(b"\t", 1)
        ents.append((path, meta.split()[2].decode()))
ents.sort()
proc = subprocess.Popen(git + ["cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
lines = []
for path, oid in ents:
    proc.stdin.write((oid + "\n").encode()); proc.stdin.flush()
    size = int(proc.stdout.readline().split()[2])
    data = proc.stdout.read(size); proc.stdout.read(1)
    lines.append(f"{hashlib.sha256(data).hexdigest()}  {path.decode()}\n")
proc.stdin.close(); proc.wait()
print(hashlib.sha256("".join(lines).encode()).hexdigest())
