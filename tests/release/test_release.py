"""The release channels (issue 51, docs/release.md): the tarball and the OCI image of
gateway-pgo-bolt built by derivations of the chain and bit-identical on rebuild, what they hold,
and nix/release/verify, which accepts the signed release and refuses, naming why, an unsigned or
tampered one, a binary that is not the one the release names, and a build from profiles trained
in the build."""

import gzip
import hashlib
import io
import json
import pathlib
import shutil
import subprocess
import tarfile

import pytest


# Every derivation of the release, each rebuilt with --check (which rebuilds the named derivation
# only, its inputs as they are): the same bytes or the build fails.
RELEASE_ATTRS = ["release-target.notices", "release-target.manifest", "release-target.tarball",
                 "release-target.image", "release"]


def sha(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def test_rebuilds_bit_identically(release, kit):
    kit.check_rebuilds(RELEASE_ATTRS)


def test_release_directory_and_sizes(release):
    names = sorted(p.name for p in release.iterdir())
    assert names == ["SHA256SUMS", "llm-gateway-0.1.0-oci.tar", "llm-gateway-0.1.0-x86_64-linux.tar.gz",
                     "pgo-engine-0.1.0-x86_64-linux.tar.gz", "verify"], names
    sums = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=release,
                          capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout + sums.stderr
    for n in names:
        print(f"{n}: {(release / n).stat().st_size} bytes")
    # The binary is 12 MB; compressed with the rest, each of the tarball and the image stays small.
    assert (release / "llm-gateway-0.1.0-x86_64-linux.tar.gz").stat().st_size < 8_000_000
    assert (release / "llm-gateway-0.1.0-oci.tar").stat().st_size < 10_000_000


def test_tarball_is_deterministic_and_holds_the_artifact(release, pgo_bolt_artifact, release_json):
    path = release / "llm-gateway-0.1.0-x86_64-linux.tar.gz"
    raw = path.read_bytes()
    assert raw[4:8] == b"\0\0\0\0", "gzip header carries an mtime (gzip -n expected)"
    with tarfile.open(path, "r:gz") as tar:
        members = tar.getmembers()
        top = "llm-gateway-0.1.0-x86_64-linux"
        names = [m.name for m in members]
        assert names == sorted(names), "names not sorted"
        assert {m.mtime for m in members} == {1}
        assert {(m.uid, m.gid) for m in members} == {(0, 0)}
        files = {m.name[len(top) + 1:]: m for m in members if m.isfile()}
        assert sorted(files) == ["LICENSE", "RELEASE.json", "THIRD-PARTY-NOTICES", "bin/gateway",
                                 "config/gateway.json", "share/gateway/bolt.log",
                                 "share/gateway/proof.json", "share/gateway/request-paths.json"]
        assert files["bin/gateway"].mode == 0o755
        read = lambda n: tar.extractfile(files[n]).read()
        assert read("bin/gateway") == (pgo_bolt_artifact / "bin" / "gateway").read_bytes()
        assert read("share/gateway/proof.json") == (pgo_bolt_artifact / "share/gateway/proof.json").read_bytes()
        assert b"Apache License" in read("LICENSE") and b"Version 2.0" in read("LICENSE")
        notices = read("THIRD-PARTY-NOTICES").decode()
        for crate in ["tokio ", "hyper ", "rustls ", "serde_json "]:
            assert f"\n  {crate}" in notices, crate
        assert json.loads(read("RELEASE.json")) == release_json
    marker = json.loads((pgo_bolt_artifact / "share/gateway/proof.json").read_text())
    assert release_json["binary_sha256"] == sha(pgo_bolt_artifact / "bin" / "gateway")
    assert release_json["pgo_binary_sha256"] == marker["profiles"]["bolt"]["pgo_binary_sha256"]
    assert release_json["profiles"] == "pinned"
    rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                         cwd=pathlib.Path(__file__).parent).stdout.strip()
    assert release_json["revision"] == rev


def test_image_holds_the_binary_its_libraries_and_a_non_root_user(release, release_json, kit):
    image = kit.built("release-target.image")
    layout = image / "layout"
    index = json.loads((layout / "index.json").read_text())
    blob = lambda d: (layout / "blobs" / "sha256" / d["digest"].split(":")[1]).read_bytes()
    manifest = json.loads(blob(index["manifests"][0]))
    config = json.loads(blob(manifest["config"]))
    assert config["architecture"] == "amd64" and config["os"] == "linux"
    assert config["created"] == "1970-01-01T00:00:01Z"
    c = config["config"]
    assert c["User"] == "65532:65532"
    assert c["Entrypoint"] == ["/usr/bin/gateway"]
    assert c["Cmd"] == ["--config", "/etc/gateway/config.json"]
    labels = c["Labels"]
    assert labels["org.opencontainers.image.revision"] == release_json["revision"]
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["org.llm-gateway.binary.sha256"] == release_json["binary_sha256"]
    assert labels["org.llm-gateway.proof.sha256"] == release_json["proof_marker_sha256"]
    assert labels["org.llm-gateway.profiles"] == "pinned"
    assert len(manifest["layers"]) == 1
    layer = gzip.decompress(blob(manifest["layers"][0]))
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert {m.mtime for m in members.values()} == {1}
        assert {(m.uid, m.gid) for m in members.values()} == {(0, 0)}
        files = sorted(n for n, m in members.items() if m.isfile())
        passwd = tar.extractfile(members["etc/passwd"]).read().decode()
    # Only what the binary needs at run time: its loader, libc and libgcc_s (readelf's NEEDED).
    assert files == ["etc/group", "etc/passwd", "lib/x86_64-linux-gnu/libc.so.6",
                     "lib/x86_64-linux-gnu/libgcc_s.so.1", "lib64/ld-linux-x86-64.so.2",
                     "usr/bin/gateway", "usr/share/doc/libc6/copyright",
                     "usr/share/doc/libgcc-s1/copyright", "usr/share/doc/llm-gateway/LICENSE",
                     "usr/share/doc/llm-gateway/THIRD-PARTY-NOTICES", "usr/share/gateway/RELEASE.json",
                     "usr/share/gateway/proof.json", "usr/share/gateway/request-paths.json"], files
    assert "gateway:x:65532:65532:" in passwd
    assert members["tmp"].mode == 0o1777


def test_verify_accepts_the_signed_release(signed, signing_key, kit):
    _, allowed = signing_key
    proc = kit.verify(signed, allowed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verify-proof --require-pinned accepts the marker" in proc.stdout
    assert "(linux/amd64): labels name the binary and the marker" in proc.stdout
    assert "the release verifies" in proc.stdout


def refused(proc, *words):
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REFUSED" in proc.stderr, proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr


def test_unsigned_release_is_refused(release, signing_key, kit):
    _, allowed = signing_key
    refused(kit.verify(release, allowed), "SHA256SUMS.sig is missing")


def test_another_key_is_refused(signed, tmp_path, kit):
    key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'release@llm-gateway namespaces="llm-gateway-release" {(tmp_path / "other.pub").read_text()}')
    refused(kit.verify(signed, allowed), "is not made by any key")


def test_a_changed_file_is_refused(copy_of, signing_key, kit):
    _, allowed = signing_key
    d = copy_of()
    with open(d / "llm-gateway-0.1.0-oci.tar", "ab") as f:
        f.write(b"\0" * 512)
    refused(kit.verify(d, allowed), "llm-gateway-0.1.0-oci.tar: sha256 is", "the file was changed")


def swap_binary_in_tarball(path, binary):
    """Rewrite the tarball at PATH with bin/gateway replaced by BINARY, all else as it was."""
    with tarfile.open(path, "r:gz") as tar:
        entries = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for m, data in entries:
            if m.name.endswith("/bin/gateway"):
                data = binary
                m.size = len(data)
            tar.addfile(m, io.BytesIO(data) if data is not None else None)
    path.write_bytes(gzip.compress(out.getvalue(), mtime=0))


@pytest.fixture(scope="session")
def other_gateway(kit):
    """A working gateway binary that is not the release's: the chain's PGO build, before BOLT."""
    return (kit.built("gateway-pgo") / "bin" / "gateway").read_bytes()


def test_a_swapped_binary_in_the_tarball_is_refused_even_when_re_signed(copy_of, signing_key, other_gateway, kit):
    key, allowed = signing_key
    d = copy_of()
    swap_binary_in_tarball(d / "llm-gateway-0.1.0-x86_64-linux.tar.gz", other_gateway)
    # Not re-signed: the checksum refuses it.
    refused(kit.verify(d, allowed), "llm-gateway-0.1.0-x86_64-linux.tar.gz: sha256 is")
    # Re-summed and re-signed (the key's holder, or a build gone wrong): the digest RELEASE.json
    # names refuses it.
    kit.resum(d)
    resigned = kit.sign(key, d, d.parent / "resigned")
    refused(kit.verify(resigned, allowed), "llm-gateway-0.1.0-x86_64-linux.tar.gz: the binary's sha256 is",
            "this is not the binary the release was built with")


def test_a_swapped_binary_in_the_image_is_refused(copy_of, signing_key, other_gateway, tmp_path, kit):
    """The image rebuilt by umoci with another /usr/bin/gateway (a layer on top), archived by
    skopeo, summed and signed again: verify refuses it by the binary's digest."""
    key, allowed = signing_key
    layout = tmp_path / "layout"
    shutil.copytree(kit.built("release-target.image") / "layout", layout)
    subprocess.run(["chmod", "-R", "u+w", str(layout)], check=True)
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{layout}:amd64", str(bundle)],
                   check=True, capture_output=True)
    target = bundle / "rootfs" / "usr" / "bin" / "gateway"
    target.chmod(0o755)
    target.write_bytes(other_gateway)
    subprocess.run(["umoci", "repack", "--image", f"{layout}:amd64", str(bundle)], check=True,
                   capture_output=True)
    d = copy_of()
    (d / "llm-gateway-0.1.0-oci.tar").unlink()
    subprocess.run(["skopeo", "copy", "-q", f"oci:{layout}:amd64",
                    f"oci-archive:{d / 'llm-gateway-0.1.0-oci.tar'}:llm-gateway:0.1.0"],
                   check=True, capture_output=True)
    kit.resum(d)
    resigned = kit.sign(key, d, d.parent / "resigned")
    refused(kit.verify(resigned, allowed), "llm-gateway-0.1.0-oci.tar (linux/amd64): the binary's sha256 is",
            "this is not the binary the release was built with")


def test_a_release_trained_in_the_build_is_labelled_and_refused(signing_key, tmp_path, kit):
    """The chain without pinned profiles (nix/tests/profile-fit.nix, `trained-in-build`, which
    test_profile_fit.py builds): its release builds, says so in RELEASE.json and the image's
    label, and verify refuses it as a release."""
    key, allowed = signing_key
    fit = ("-f", "nix/tests/profile-fit.nix")
    rel = kit.built(*fit, "chains.trainedInBuild.release")
    manifest = json.loads((kit.built(*fit, "chains.trainedInBuild.release-target.manifest") / "RELEASE.json").read_text())
    assert manifest["profiles"] == "trained in build"
    layout = kit.built(*fit, "chains.trainedInBuild.release-target.image") / "layout"
    blob = lambda d: (layout / "blobs" / "sha256" / d["digest"].split(":")[1]).read_bytes()
    m = json.loads(blob(json.loads((layout / "index.json").read_text())["manifests"][0]))
    assert json.loads(blob(m["config"]))["config"]["Labels"]["org.llm-gateway.profiles"] == "trained in build"
    refused(kit.verify(kit.sign(key, rel, tmp_path / "signed"), allowed),
            "built from profiles trained in the build", "not a release")
