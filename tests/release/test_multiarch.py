"""The two-platform release (`release-multiarch`): the x86_64 and aarch64 tarballs and one image
index of linux/amd64 and linux/arm64, rebuilt bit-identically, verified, loaded by podman (which
picks this machine's platform), and the arm64 image's binary, unpacked from the image with the
image's own loader and glibc, serving the SDK suite under qemu-user. Needs the aarch64 chain's
artifact (gateway-pgo-bolt-aarch64, which tests/run-aarch64 builds): skips, saying so, where it is
not in the store, rather than building the aarch64 chain inside tests/run."""

import gzip
import io
import json
import os
import subprocess
import tarfile

import pytest

from nixchain import offline_build

ATTRS = ["aarch64.release-target.notices", "aarch64.release-target.manifest",
         "aarch64.release-target.tarball", "aarch64.release-target.image", "release-multiarch"]
QEMU = "/usr/bin/qemu-aarch64-static"


@pytest.fixture(scope="module")
def multiarch(kit):
    probe = offline_build("gateway-pgo-bolt-aarch64", "--no-out-link", "--max-jobs", "0", check=False)
    if probe.returncode != 0:
        pytest.skip("the aarch64 chain's artifact is not in the store (nix/offline/build "
                    "gateway-pgo-bolt-aarch64, as tests/run-aarch64 does): the arm64 release is "
                    "one attribute away, release-multiarch")
    return kit.built("release-multiarch")


def image_files(archive, arch):
    """{path: bytes} of the ARCH image's layer in the archive's image index."""
    with tarfile.open(archive) as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    blob = lambda d: files["blobs/" + d.replace(":", "/")]
    top = json.loads(files["index.json"])
    index = json.loads(blob(top["manifests"][0]["digest"]))
    desc = [d for d in index["manifests"] if d["platform"]["architecture"] == arch]
    assert len(desc) == 1, index
    manifest = json.loads(blob(desc[0]["digest"]))
    config = json.loads(blob(manifest["config"]["digest"]))
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(manifest["layers"][0]["digest"])))) as t:
            return config, {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def test_multiarch_release_rebuilds_bit_identically(multiarch, kit):
    kit.check_rebuilds(ATTRS)


def test_one_index_of_both_platforms(multiarch):
    names = sorted(p.name for p in multiarch.iterdir())
    assert names == ["SHA256SUMS", "llm-gateway-0.1.0-aarch64-linux.tar.gz", "llm-gateway-0.1.0-oci.tar",
                     "llm-gateway-0.1.0-x86_64-linux.tar.gz", "pgo-engine-0.1.0-x86_64-linux.tar.gz",
                     "verify"], names
    for n in names:
        print(f"{n}: {(multiarch / n).stat().st_size} bytes")
    config, files = image_files(multiarch / "llm-gateway-0.1.0-oci.tar", "arm64")
    assert config["architecture"] == "arm64"
    assert config["config"]["Labels"]["org.llm-gateway.target"] == "aarch64-unknown-linux-gnu"
    libs = sorted(n for n in files if n.startswith("lib"))
    assert libs == ["lib/aarch64-linux-gnu/libc.so.6", "lib/aarch64-linux-gnu/libgcc_s.so.1",
                    "lib/ld-linux-aarch64.so.1"], libs
    assert files["usr/bin/gateway"][18:20] == b"\xb7\x00"  # EM_AARCH64


def test_signed_multiarch_release_verifies(multiarch, signing_key, kit, tmp_path):
    key, allowed = signing_key
    proc = kit.verify(kit.sign(key, multiarch, tmp_path / "signed"), allowed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for what in ["llm-gateway-0.1.0-aarch64-linux.tar.gz: binary", "(linux/amd64): labels",
                 "(linux/arm64): labels", "the release verifies"]:
        assert what in proc.stdout, proc.stdout


def test_podman_loads_this_machines_platform_of_the_index(multiarch):
    if subprocess.run(["which", "podman"], capture_output=True).returncode != 0:
        pytest.skip("podman is not installed")
    subprocess.run(["podman", "rmi", "-f", "localhost/llm-gateway:0.1.0"], capture_output=True)
    loaded = subprocess.run(["podman", "load", "-i", str(multiarch / "llm-gateway-0.1.0-oci.tar")],
                            capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    info = json.loads(subprocess.run(["podman", "image", "inspect", "localhost/llm-gateway:0.1.0"],
                                     capture_output=True, text=True, check=True).stdout)[0]
    assert info["Architecture"] == "amd64", info["Architecture"]
    run = subprocess.run(["podman", "run", "--rm", "--runtime", "runc", "--network", "host",
                          "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
                          "localhost/llm-gateway:0.1.0", "--version"], capture_output=True, text=True)
    subprocess.run(["podman", "rmi", "-f", "localhost/llm-gateway:0.1.0"], capture_output=True)
    if run.returncode != 0 and "runc" in run.stderr:
        pytest.skip(f"podman cannot run a container here: {run.stderr.strip()[-300:]}")
    assert run.returncode == 0 and run.stdout.startswith("gateway "), run


def test_arm64_image_binary_serves_the_sdk_suite_under_qemu(multiarch, kit, tmp_path):
    """The arm64 image's root file system unpacked, its binary run by qemu-aarch64-static with the
    image's own loader and glibc (-L ROOT), as the gateway of tests/gateway/test_sdk_conformance.py."""
    if not os.access(QEMU, os.X_OK):
        pytest.skip(f"no {QEMU} (nix/offline/aarch64-setup installs qemu-user-static)")
    _, files = image_files(multiarch / "llm-gateway-0.1.0-oci.tar", "arm64")
    root = tmp_path / "rootfs"
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "usr/bin/gateway").chmod(0o755)
    (root / "lib/ld-linux-aarch64.so.1").chmod(0o755)
    version = subprocess.run([QEMU, "-L", str(root), str(root / "usr/bin/gateway"), "--version"],
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("gateway "), version
    wrapper = tmp_path / "gateway-arm64"
    wrapper.write_text(f'#!/bin/sh\nexec {QEMU} -L {root} {root}/usr/bin/gateway "$@"\n')
    wrapper.chmod(0o755)
    summary = kit.sdk_suite(wrapper)
    print(f"SDK suite, arm64 binary from the image under qemu: {summary}")
