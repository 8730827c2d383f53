#!/usr/bin/env python3
"""sync_tree.py COMMIT DEST [GIT_DIR]: make DEST hold exactly COMMIT's tracked files, rewriting
only the files whose content differs (cargo sees the others unchanged by their mtime), deleting
the files COMMIT does not have (DEST's `target` and dot-directories are left alone)."""
import os
import subprocess
import sys

commit, dest = sys.argv[1], sys.argv[2]
git = ["git"] + (["-C", sys.argv[3]] if len(sys.argv) > 3 else [])
listing = subprocess.run(git + ["ls-tree", "-r", "-z", commit], check=True, capture_output=True).stdout
want = {}
for ent in listing.split(b"\0"):
    if not ent:
        continue
    meta, path = ent.split(b"\t", 1)
    mode, kind, oid = meta.split()
    if kind == b"blob":
        want[path.decode()] = (mode.decode(), oid.decode())
# Blob contents in one batch.
proc = subprocess.Popen(git + ["cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
changed = 0
for path, (mode, oid) in sorted(want.items()):
    proc.stdin.write((oid + "\n").encode())
    proc.stdin.flush()
    header = proc.stdout.readline().split()
    data = proc.stdout.read(int(header[2]))
    proc.stdout.read(1)
    full = os.path.join(dest, path)
    try:
        if os.path.islink(full) or open(full, "rb").read() != data:
            raise FileNotFoundError
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if os.path.islink(full):
            os.unlink(full)
        with open(full, "wb") as f:
            f.write(data)
        changed += 1
    os.chmod(full, 0o755 if mode == "100755" else 0o644)
proc.stdin.close()
proc.wait()
removed = 0
for top, dirs, files in os.walk(dest):
    rel_top = os.path.relpath(top, dest)
    if rel_top == ".":
        dirs[:] = [d for d in dirs if d != "target" and not d.startswith(".")]
        files = [f for f in files if not f.startswith(".")]
    for f in files:
        rel = os.path.normpath(os.path.join(rel_top, f))
        if rel not in want:
            os.unlink(os.path.join(top, f))
            removed += 1
print(f"{commit}: {changed} file(s) written, {removed} removed", file=sys.stderr)
