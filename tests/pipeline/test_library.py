"""The library's builder on a crate other than the gateway (docs/library.md): the template's crate
(templates/default) built offline through the whole chain, its training command run under the
engine's training contract. Its profiles are not pinned, so the chain trains them in the build:
the artifact is optimized and carries a valid proof marker saying so, and the release check
refuses it."""

import json
import pathlib
import subprocess

from nixchain import offline_build

READELF = "/usr/lib/llvm-22/bin/llvm-readelf"


def built(attr):
    out = offline_build(attr, "--no-out-link").stdout.strip().splitlines()[-1]
    assert out.startswith("/nix/store/"), out
    return pathlib.Path(out)


def test_the_template_crate_builds_through_the_chain(engine_bin, tmp_path):
    out = built("templates.default.pgo-bolt")
    binary = out / "bin" / "wordfreq"
    sections = subprocess.run([READELF, "-S", "-W", str(binary)], check=True, capture_output=True, text=True).stdout
    assert ".note.bolt_info" in sections
    proof = json.loads((out / "share" / "wordfreq" / "proof.json").read_text())
    assert proof["package"] == "wordfreq" and proof["binary"] == "wordfreq", proof
    assert proof["profiles"]["provenance"] == "trained in build", proof["profiles"]
    assert proof["pgo"]["profraw_files"] > 0 and proof["bolt"]["functions_with_profile"] > 0, proof
    subprocess.run([str(engine_bin), "verify-proof", str(out)], check=True)
    refused = subprocess.run([str(engine_bin), "verify-proof", "--require-pinned", str(out)],
                             capture_output=True, text=True)
    assert refused.returncode != 0
    assert "nix/offline/refresh-profiles --chain templates.default" in refused.stderr, refused.stderr
    # It answers as the plain build does.
    plain = built("templates.default.plain") / "bin" / "wordfreq"
    text = tmp_path / "words.txt"
    text.write_text("the chain trains the binary and the binary answers the same\n" * 50)
    answers = [subprocess.run([str(b), "3", str(text)], check=True, capture_output=True, text=True).stdout
               for b in (plain, binary)]
    assert answers[0] == answers[1] == "200 the\n100 binary\n50 and\n", answers


def test_the_release_check_refuses_a_crate_trained_in_the_build():
    proc = offline_build("templates.default.release-check", "--no-out-link", check=False)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "stage wordfreq-release-check" in proc.stdout, proc.stdout[-3000:]
    assert "nix/offline/refresh-profiles --chain templates.default" in proc.stdout, proc.stdout[-3000:]
