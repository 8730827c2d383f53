#!/usr/bin/env python3
"""Helpers of bench/profile-portability and bench/refresh-replay (stdlib only).

  analyze.py proftext FILE                 functions, with counts, counters (one line of JSON)
  analyze.py compare-proftext PINNED NEW   how NEW's functions (names, CFG hashes, counter counts)
                                           match PINNED's, and which of PINNED's functions with
                                           non-zero counts changed hash or disappeared (JSON)
  analyze.py metadata LOG...               the `-C metadata=` values of the rustc command lines
                                           in cargo -v logs, one `crate-name metadata` a line
  analyze.py compare-metadata REF OTHER    agreement of two `metadata` listings (JSON)
  analyze.py bolt-report BOLT_LOG FDATA BINARY_SYMS
                                           llvm-bolt's profiled/stale counts and the fdata
                                           functions with no symbol of that name and binding
                                           in the binary (BINARY_SYMS: llvm-readelf -sW output)
"""
import json
import re
import sys


def parse_proftext(path):
    """name -> (hash, counters, sum of counts) of an IR-level `llvm-profdata merge --text` file."""
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [l.rstrip("\n") for l in f]
    i, n = 0, len(lines)
    while i < n:
        l = lines[i]
        if (not l) or l.startswith("#") or l.startswith(":"):
            i += 1
            continue
        # A record: name, "# Func Hash:", hash, "# Num Counters:", k, "# Counter Values:", k values,
        # then optional sections (bitmap bytes, value profile) up to the blank line.
        if i + 5 < n and lines[i + 1] == "# Func Hash:" and lines[i + 3] == "# Num Counters:":
            name, h, k = l, int(lines[i + 2]), int(lines[i + 4])
            vals = [int(v) for v in lines[i + 6:i + 6 + k]]
            out[name] = (h, k, sum(vals))
            i += 6 + k
            while i < n and lines[i] != "":
                i += 1
            continue
        i += 1
    return out


def cmd_proftext(path):
    p = parse_proftext(path)
    print(json.dumps({"functions": len(p), "with_counts": sum(1 for v in p.values() if v[2] > 0),
                      "counters": sum(v[1] for v in p.values())}))


# crt and compiler builtins: never in the LLVM profile (not instrumented Rust code).
def cmd_compare_proftext(pinned_path, new_path, hot_path=None):
    pinned = parse_proftext(pinned_path)
    new = parse_proftext(new_path)
    # The functions whose counts decide "hot": PINNED's own, or those of HOT (a proftext of the
    # same functions with the training counts) when given.
    hot_src = parse_proftext(hot_path) if hot_path else pinned
    hot = {n for n, v in hot_src.items() if v[2] > 0}
    same = [n for n in new if n in pinned and pinned[n][:2] == new[n][:2]]
    changed = sorted(n for n in new if n in pinned and pinned[n][:2] != new[n][:2])
    only_new = sorted(n for n in new if n not in pinned)
    gone = sorted(n for n in pinned if n not in new)
    hot_changed = [n for n in changed if n in hot]
    hot_gone = [n for n in gone if n in hot]
    print(json.dumps({
        "pinned_functions": len(pinned), "pinned_with_counts": len(hot),
        "new_functions": len(new),
        "equal_name_hash_counters": len(same),
        "hash_changed": len(changed), "hash_changed_hot": len(hot_changed),
        "only_in_new": len(only_new), "gone": len(gone), "gone_hot": len(hot_gone),
        "hot_changed_names": hot_changed[:20], "hot_gone_names": hot_gone[:20],
        "cold_changed_names": [n for n in changed if n not in hot][:20],
        "only_in_new_names": only_new[:20],
    }))


META = re.compile(r"--crate-name (\S+).*?-C metadata=([0-9a-f]+)")


def cmd_metadata(logs):
    seen = set()
    for log in logs:
        with open(log, encoding="utf-8", errors="replace") as f:
            for l in f:
                if "Running `" not in l:
                    continue
                m = META.search(l)
                if m:
                    seen.add((m.group(1), m.group(2)))
    for c, h in sorted(seen):
        print(c, h)


def read_pairs(path):
    with open(path) as f:
        return {tuple(l.split()) for l in f if l.strip()}


def cmd_compare_metadata(ref, other):
    a, b = read_pairs(ref), read_pairs(other)
    print(json.dumps({"reference_units": len(a), "units": len(b), "equal": len(a & b),
                      "only_reference": sorted(" ".join(x) for x in a - b)[:20],
                      "only_this": sorted(" ".join(x) for x in b - a)[:20]}))


def cmd_bolt_report(log_path, fdata_path, syms_path):
    log = open(log_path, encoding="utf-8", errors="replace").read()
    m = re.search(r"(\d+) out of (\d+) functions in the binary \(([\d.]+)%\) have non-empty execution profile", log)
    profiled, total = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    # "1 (0.1% of all profiled) function have ..." / "N (...) functions have ...".
    m = re.search(r"(\d+) (?:\([^)]*\) )?functions? have invalid \(possibly stale\) profile", log)
    stale = int(m.group(1)) if m else 0
    stale_lines = [l for l in log.splitlines() if "stale" in l.lower() or "invalid" in l.lower()]
    # -report-stale lists them, indented, after "Functions with stale profile:".
    lines = log.splitlines()
    stale_names = []
    for i, l in enumerate(lines):
        if "Functions with stale profile:" in l:
            for l2 in lines[i + 1:]:
                if not l2.startswith("  "):
                    break
                stale_names.append(l2.strip())
    # Symbols of the binary: local FUNC symbols are what BOLT names NAME/N in an fdata file.
    local, glob = set(), set()
    for l in open(syms_path, encoding="utf-8", errors="replace"):
        f = l.split()
        if len(f) >= 8 and f[3] in ("FUNC", "IFUNC", "NOTYPE"):
            (local if f[4] == "LOCAL" else glob).add(f[7].split("@")[0])
    funcs, counts = {}, {}
    total_count = 0
    for l in open(fdata_path, encoding="utf-8", errors="replace"):
        f = l.split()
        if len(f) < 7 or f[0] not in ("0", "1", "2"):
            continue
        c = int(f[-1])
        total_count += c
        for is_sym, name in ((f[0], f[1]), (f[3], f[4])):
            if is_sym == "1":
                funcs[name] = funcs.get(name, 0)
        if f[0] == "1":
            counts[f[1]] = counts.get(f[1], 0) + c

    def found(name):
        base, sep, idx = name.rpartition("/")
        if sep and idx.isdigit():
            return base in local
        return name in glob
    missing = sorted(n for n in funcs if not found(n))
    print(json.dumps({"profiled": profiled, "binary_functions": total, "stale": stale, "stale_names": stale_names,
                      "stale_lines": stale_lines[:20], "fdata_functions": len(funcs),
                      "fdata_unmatched": missing,
                      "unmatched_counts": sum(counts.get(n, 0) for n in missing),
                      "fdata_total_counts": total_count}))


def main(argv):
    cmd, args = argv[1], argv[2:]
    {"proftext": lambda: cmd_proftext(*args),
     "compare-proftext": lambda: cmd_compare_proftext(*args),
     "metadata": lambda: cmd_metadata(args),
     "compare-metadata": lambda: cmd_compare_metadata(*args),
     "bolt-report": lambda: cmd_bolt_report(*args)}[cmd]()


if __name__ == "__main__":
    main(sys.argv)
