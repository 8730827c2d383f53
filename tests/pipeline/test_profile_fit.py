"""Which profiles a build uses (issue 25): the compositions of nix/tests/profile-fit.nix, each a
real chain that must build. With no profile pinned for the build's key the chain trains in the
sandbox and says so (the release check refuses that artifact: test_fail_closed.py); with a comment
added at the top of gateway/src/main.rs the pinned profiles still fit, LLVM's by its functions'
hashes and BOLT's by the content of the functions it profiles, so the artifact builds with them."""

import json
import pathlib
import subprocess

from nixchain import PINNED, ROOT, offline_build

FIT = ("-f", "nix/tests/profile-fit.nix")
WHERE = PINNED.relative_to(ROOT)


def build(attr):
    out = offline_build(*FIT, attr, "--no-out-link").stdout.strip().splitlines()[-1]
    assert out.startswith("/nix/store/"), out
    return pathlib.Path(out)


def proof_of(out):
    return json.loads((out / "share" / "gateway" / "proof.json").read_text())


def test_without_pinned_profiles_the_chain_trains_in_the_build(engine_bin):
    out = build("trained-in-build")
    proof = proof_of(out)
    profiles = proof["profiles"]
    assert profiles["provenance"] == "trained in build", profiles
    for kind in ["llvm", "bolt"]:
        assert profiles[kind]["provenance"] == "trained in build"
        assert profiles[kind]["reason"] == f"no pinned {kind} profile at {WHERE}/{kind}"
    # Optimized all the same: PGO from the fresh LLVM profile, laid out by BOLT.
    assert proof["bolt"]["functions_with_profile"] > 0
    sections = subprocess.run(["/usr/lib/llvm-22/bin/llvm-readelf", "-S", "-W", str(out / "bin" / "gateway")],
                              check=True, capture_output=True, text=True).stdout
    assert ".note.bolt_info" in sections
    subprocess.run([str(engine_bin), "verify-proof", str(out)], check=True)
    refused = subprocess.run([str(engine_bin), "verify-proof", "--require-pinned", str(out)],
                             capture_output=True, text=True)
    assert refused.returncode != 0
    assert "nix/offline/refresh-profiles" in refused.stderr, refused.stderr


def test_a_comment_at_the_top_of_main_keeps_the_pinned_profiles(engine_bin):
    out = build("comment-at-top-of-main")
    profiles = proof_of(out)["profiles"]
    assert profiles["provenance"] == "pinned", profiles
    for kind in ["llvm", "bolt"]:
        manifest = json.loads((PINNED / kind / "manifest.json").read_text())
        assert profiles[kind]["sha256"] == manifest["sha256"]
        # Trained on the sources before the comment: the profiles fit without a refresh.
        assert profiles[kind]["same_source_as_build"] is False
    subprocess.run([str(engine_bin), "verify-proof", "--require-pinned", str(out)], check=True)
    release = build("comment-at-top-of-main-release")
    assert (release / "gateway-pgo-bolt").resolve() == out
