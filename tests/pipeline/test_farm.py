"""The chain on Nix's own distributed builds and an HTTP binary cache (issue 52), with the Nix 2.8
this project runs and nothing mocked: nix/farm/farm brings up two remote builders with stores of
their own (ssh-ng://localhost, which Nix runs without sshd), nginx on 127.0.0.1 as a WebDAV binary
cache, a signing key and the post-build-hook; the client builds nothing itself (max-jobs 0).

The chain built through it is the template crate's (templates/default: a whole chain in about a
minute); the gateway's release through the farm is a command of its own (docs/farm.md reports it).
"""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from nixchain import ROOT, offline_build

FARM = ROOT / "nix" / "farm" / "farm"
NIX = ["--extra-experimental-features", "nix-command"]
ATTR = "templates.default.pgo-bolt"


def farm(*args, check=True, timeout=1800):
    proc = subprocess.run([str(FARM), *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"nix/farm/farm {' '.join(args)} failed:\n{proc.stdout[-6000:]}")
    return proc


def run(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw).stdout


def env_of(farm_dir):
    return dict(line.split("=", 1) for line in (farm_dir / "farm.env").read_text().split())


def stages(farm_dir):
    """(stage, builder, state, drv) of every stage the farm's builds started on a builder."""
    text = (farm_dir / "logs" / "builds.tsv").read_text()
    return [tuple(line.split("\t")) for line in text.splitlines() if line]


def outputs(store, drv):
    return run("nix-store", "--store", store, "--query", "--outputs", drv).split()


def valid(store, path):
    return subprocess.run(["nix-store", "--store", store, "--check-validity", path],
                          capture_output=True).returncode == 0


def built_here(store, path):
    """Whether STORE holds PATH as a path it built itself (Nix's "ultimate" trust), not a copy."""
    if not valid(store, path):
        return False
    [info] = json.loads(run("nix", *NIX, "path-info", "--json", "--store", store, path))
    return info.get("ultimate") is True


def nar_hash(store, path):
    return run("nix-store", "--store", store, "--query", "--hash", path).strip()


def builder_store(farm_dir, name):
    return f"local?root={farm_dir}/builders/{name}/store"


@pytest.fixture
def scratch(tmp_path):
    yield tmp_path
    subprocess.run([str(FARM), "down", "--dir", str(tmp_path / "farm")], capture_output=True)
    subprocess.run(["chmod", "-R", "u+w", str(tmp_path)], check=False)
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(scope="module")
def built_farm(tmp_path_factory):
    """A farm of two builders that has built the template's whole chain."""
    base = tmp_path_factory.mktemp("farm")
    farm_dir = base / "farm"
    farm("up", "--dir", str(farm_dir))
    proc = farm("build", "--dir", str(farm_dir), ATTR)
    yield farm_dir, proc.stdout
    farm("down", "--dir", str(farm_dir), check=False)
    subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
    shutil.rmtree(base, ignore_errors=True)


def test_every_stage_is_built_on_a_builder_and_signed_into_the_http_cache(built_farm):
    farm_dir, report = built_farm
    env = env_of(farm_dir)
    client = env["FARM_CLIENT_STORE"]
    rows = stages(farm_dir)
    names = {stage for stage, _, _, _ in rows}
    for stage in ["pgo-engine", "wordfreq-instrumented", "wordfreq-profile", "wordfreq-pgo",
                  "wordfreq-bolt-profile", "wordfreq-pgo-bolt"]:
        assert stage in names, (stage, report)
    assert all(state == "built" for _, _, state, _ in rows), report
    # Both builders took stages (two are ready at once at the start, and each builder takes one job).
    assert {builder for _, builder, _, _ in rows} == {"b1", "b2"}, report

    uploads = (farm_dir / "logs" / "uploads.tsv").read_text().splitlines()
    assert not [u for u in uploads if "\tfailed\t" in u], uploads
    uploaded = {line.split("\t")[2] for line in uploads}
    pk = (farm_dir / "keys" / "cache.pk").read_text().strip()
    key_name = pk.split(":")[0]
    for stage, builder, _, drv in rows:
        for out in outputs(client, drv):
            # Built on that builder, in its own store (Nix marks a path it built "ultimate"); the
            # other builder has it at most as a copied input, the client as a copied output.
            other = {"b1": "b2", "b2": "b1"}[builder]
            assert built_here(builder_store(farm_dir, builder), out), (stage, builder, out)
            assert not built_here(builder_store(farm_dir, other), out), (stage, other, out)
            assert valid(client, out) and not built_here(client, out), (stage, out)
            # Uploaded by the client's post-build-hook, signed with the farm's key.
            assert out in uploaded, (stage, out, uploads)
            narinfo = farm_dir / "cache" / f"{pathlib.Path(out).name.split('-')[0]}.narinfo"
            assert f"Sig: {key_name}:" in narinfo.read_text(), narinfo.read_text()
    # The cache, read over HTTP, verifies against the public key alone.
    run("nix", *NIX, "store", "verify", "--store", env["FARM_CACHE_URL"], "--sigs-needed", "1",
        "--option", "trusted-public-keys", pk, *sorted(uploaded))
    # The PUTs reached nginx over HTTP.
    access = (farm_dir / "nginx" / "access.log").read_text()
    assert '"PUT /nar/' in access and " 201 " in access, access[-2000:]


def test_the_builders_hold_no_key(built_farm):
    farm_dir, _ = built_farm
    # The client's hook signs: the builders' configuration names no key and no hook.
    for name in ["b1", "b2"]:
        conf = (farm_dir / "builders" / name / "nix.conf").read_text()
        assert "secret-key" not in conf and "post-build-hook" not in conf, conf


def test_which_post_build_hooks_nix_runs_for_a_remote_build(scratch):
    """The question NixOS/nix#4245 raises, asked of the Nix this project runs: for a remote build,
    Nix 2.8 runs the client's hook (after copying the outputs back) and the builder's own hook (on
    the builder), each with DRV_PATH set and OUT_PATHS empty (NixOS/nix#6446), which is why the
    farm's hook reads the outputs from the derivation."""
    farm_dir = scratch / "farm"
    farm("up", "--dir", str(farm_dir), "--builders", "1")
    record = scratch / "hooks.log"
    for who in ["client", "builder"]:
        hook = scratch / f"{who}-hook"
        hook.write_text(f'#!/bin/sh\necho "{who} DRV_PATH=$DRV_PATH OUT_PATHS=[$OUT_PATHS]" >> {record}\n')
        hook.chmod(0o755)
    conf = farm_dir / "builders" / "b1" / "nix.conf"
    conf.write_text(conf.read_text() + f"post-build-hook = {scratch / 'builder-hook'}\n")
    expr = ('derivation { name = "farm-hook-probe"; system = "x86_64-linux"; builder = "/bin/sh"; '
            f'args = [ "-c" "echo {time.time_ns()} > $out" ]; }}')
    machines = (farm_dir / "machines").read_text().strip()
    proc = subprocess.run(["nix-build", "-E", expr, "--no-out-link", "--store", env_of(farm_dir)["FARM_CLIENT_STORE"],
                           "--max-jobs", "0", "--builders", machines, "--option", "substituters", "",
                           "--option", "post-build-hook", str(scratch / "client-hook")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout.strip().splitlines()[-1]
    drv = run("nix-store", "--store", env_of(farm_dir)["FARM_CLIENT_STORE"], "--query", "--deriver", out).strip()
    lines = record.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == ["builder", "client"], lines
    for line in lines:
        assert f"DRV_PATH={drv}" in line, lines
    version = run("nix-build", "--version").split()[-1]
    if version.startswith("2.8."):
        assert all(line.endswith("OUT_PATHS=[]") for line in lines), lines


def test_stages_that_train_nothing_are_the_same_bytes_as_a_local_build(built_farm):
    """The farm's outputs are the same paths as a local build's, and where the stage's inputs are
    committed (no training in the build) the same bytes. The template's later stages train in the
    build (it pins no profiles), so their bytes differ from machine to machine: that is why the
    release check refuses such an artifact, and why the gateway's release, which reads pinned
    profiles, is the same bytes through the farm (docs/farm.md)."""
    farm_dir, _ = built_farm
    client = env_of(farm_dir)["FARM_CLIENT_STORE"]
    by_stage = {stage: drv for stage, _, _, drv in stages(farm_dir)}
    for attr, stage in [("templates.default.engine", "pgo-engine"),
                        ("templates.default.instrumented", "wordfreq-instrumented")]:
        local = offline_build(attr, "--no-out-link").stdout.strip().splitlines()[-1]
        [farm_out] = outputs(client, by_stage[stage])
        assert farm_out == local, (stage, farm_out, local)
        assert nar_hash(client, farm_out) == nar_hash("auto", local), stage


def test_a_fresh_store_substitutes_the_release_verifies_it_and_rebuilds_it_identically(built_farm):
    farm_dir, _ = built_farm
    env = env_of(farm_dir)
    fresh = farm_dir.parent / "fresh"
    proc = farm("substitute", "--dir", str(farm_dir), "--store", str(fresh), ATTR)
    assert "built none" in proc.stdout, proc.stdout
    log = pathlib.Path(f"{fresh}.log").read_text()
    [artifact] = [line for line in log.splitlines() if line.startswith("/nix/store/")][-1:]
    assert f"copying path '{artifact}' from '{env['FARM_CACHE_URL']}'" in log, log[-3000:]
    assert "will be built" not in log and "building '" not in log, log[-3000:]
    run("nix-store", "--store", str(fresh), "--verify", "--check-contents")
    # --check: the substituted artifact rebuilt here, from its substituted inputs, is the same bytes.
    pk = (farm_dir / "keys" / "cache.pk").read_text().strip()
    check = offline_build(ATTR, "--no-out-link", "--store", str(fresh), "--check",
                          "--option", "substituters", env["FARM_CACHE_URL"],
                          "--option", "trusted-public-keys", pk)
    assert "checking outputs of '" in check.stdout, check.stdout[-3000:]
    assert "may not be deterministic" not in check.stdout, check.stdout[-3000:]


def serve_directory(directory):
    """A plain HTTP server (GET only) over DIRECTORY on a free port: a copy of the cache to tamper."""
    port = free_port()
    proc = subprocess.Popen(["python3", "-m", "http.server", "--bind", "127.0.0.1", str(port),
                             "--directory", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def base32_sha256(path):
    return run("nix-hash", "--type", "sha256", "--flat", "--base32", str(path)).strip()


def realise(path, cache_url, pk, store):
    # No narinfo cached from an earlier case: each case's cache answers for itself.
    return subprocess.run(["nix-store", "--store", str(store), "--realise", path, "--max-jobs", "0",
                           "--option", "narinfo-cache-positive-ttl", "0",
                           "--option", "narinfo-cache-negative-ttl", "0",
                           "--option", "substituters", cache_url, "--option", "trusted-public-keys", pk],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_tampered_nar_tampered_narinfo_and_unsigned_paths_are_refused(built_farm, tmp_path):
    farm_dir, _ = built_farm
    client = env_of(farm_dir)["FARM_CLIENT_STORE"]
    pk = (farm_dir / "keys" / "cache.pk").read_text().strip()
    by_stage = {stage: drv for stage, _, _, drv in stages(farm_dir)}
    [artifact] = outputs(client, by_stage["wordfreq-pgo-bolt"])
    digest = pathlib.Path(artifact).name.split("-")[0]

    copy = tmp_path / "cache"
    shutil.copytree(farm_dir / "cache", copy)
    server, url = serve_directory(copy)
    try:
        narinfo_file = copy / f"{digest}.narinfo"
        original = narinfo_file.read_text()
        fields = dict(line.split(": ", 1) for line in original.splitlines())
        nar_file = copy / fields["URL"]
        nar = subprocess.run(["zstd", "-dcq", str(nar_file)], check=True, capture_output=True).stdout
        # One byte of the binary changed, recompressed: the NAR no longer has the signed hash.
        at = nar.index(b"\x7fELF") + 200
        tampered = nar[:at] + bytes([nar[at] ^ 0xFF]) + nar[at + 1:]
        subprocess.run(["zstd", "-qf", "-o", str(nar_file)], input=tampered, check=True)
        proc = realise(artifact, url, pk, tmp_path / "s1")
        assert proc.returncode != 0, proc.stdout
        assert artifact in proc.stdout and "hash mismatch" in proc.stdout, proc.stdout[-3000:]

        # The narinfo rewritten to the tampered NAR's hashes: now its signature does not verify.
        (tmp_path / "tampered.nar").write_bytes(tampered)
        rewritten = original.replace(fields["NarHash"], "sha256:" + base32_sha256(tmp_path / "tampered.nar")) \
                            .replace(fields["FileHash"], "sha256:" + base32_sha256(nar_file)) \
                            .replace(f"FileSize: {fields['FileSize']}", f"FileSize: {nar_file.stat().st_size}")
        narinfo_file.write_text(rewritten)
        proc = realise(artifact, url, pk, tmp_path / "s2")
        assert proc.returncode != 0, proc.stdout
        assert f"'{artifact}' from '{url}' is not signed by any of the keys" in proc.stdout, proc.stdout[-3000:]

        # The narinfo without its signature: an unsigned path.
        narinfo_file.write_text("".join(l + "\n" for l in original.splitlines() if not l.startswith("Sig: ")))
        shutil.copy(farm_dir / "cache" / fields["URL"], nar_file)
        proc = realise(artifact, url, pk, tmp_path / "s3")
        assert proc.returncode != 0, proc.stdout
        assert f"'{artifact}' from '{url}' is not signed by any of the keys" in proc.stdout, proc.stdout[-3000:]

        # Untouched, the copy serves the path: the refusals above were the tampering's.
        narinfo_file.write_text(original)
        proc = realise(artifact, url, pk, tmp_path / "s4")
        assert proc.returncode == 0, proc.stdout[-3000:]
    finally:
        server.terminate()
        server.wait()


def test_the_benchmark_feature_goes_to_the_benchmark_builder_only(scratch):
    """The wall-clock holdout requires `gateway-benchmark`; only b2 of this farm lists it, so Nix
    sends it there. The holdout here is the fail-closed composition whose batch is invalid (fake
    gateways: cheap and certain to fail), so the failure also names the stage and the builder."""
    farm_dir = scratch / "farm"
    farm("up", "--dir", str(farm_dir), "--benchmark-builder", "b2")
    # The trainer as an earlier farm run left it in the client's store.
    trainer = offline_build("trainer", "--no-out-link").stdout.strip().splitlines()[-1]
    run("nix", *NIX, "copy", "--no-check-sigs", "--to", env_of(farm_dir)["FARM_CLIENT_STORE"], trainer)
    proc = farm("build", "--dir", str(farm_dir), "--file", "nix/tests/fail-closed.nix",
                "holdout-invalid-batch", check=False)
    assert proc.returncode != 0, proc.stdout[-3000:]
    rows = stages(farm_dir)
    holdout = [r for r in rows if r[0] == "gateway-holdout"]
    assert holdout and all(builder == "b2" for _, builder, _, _ in holdout), rows
    assert "farm: stage gateway-holdout on builder b2 failed" in proc.stdout, proc.stdout[-3000:]
    assert "INVALID" in proc.stdout, proc.stdout[-3000:]


def test_a_builder_without_the_toolchain_is_named(scratch):
    farm_dir = scratch / "farm"
    farm("up", "--dir", str(farm_dir), "--builders", "1")
    toolchain = run(str(ROOT / "nix" / "offline" / "build"), "--sandbox-paths").split()[-1]
    conf = farm_dir / "builders" / "b1" / "nix.conf"
    conf.write_text(conf.read_text().replace(f" {toolchain}", ""))
    # The preflight names the builder and the missing path before any stage is sent.
    proc = farm("build", "--dir", str(farm_dir), ATTR, check=False)
    assert proc.returncode != 0
    assert f"farm: builder b1 cannot build the stages: farm sandbox probe: builder b1 lacks in its sandbox: {toolchain}" \
        in proc.stdout, proc.stdout[-3000:]
    # Without it, the first stage that runs cargo fails, named with the builder.
    proc = farm("build", "--dir", str(farm_dir), "--no-preflight", ATTR, check=False)
    assert proc.returncode != 0
    assert "cargo: command not found" in proc.stdout, proc.stdout[-3000:]
    # --keep-going: every stage that reached the builder failed, each named with it.
    [verdict] = [line for line in proc.stdout.splitlines() if line.startswith("farm: stage ")]
    assert "pgo-engine on builder b1" in verdict and verdict.endswith(")") and " failed (log " in verdict, verdict


class Answer500(BaseHTTPRequestHandler):
    def _500(self):
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = do_PUT = _500

    def log_message(self, *args):
        pass


def stop_nginx(farm_dir):
    pid = int((farm_dir / "nginx" / "nginx.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        if not (farm_dir / "nginx" / "nginx.pid").exists():
            break
        time.sleep(0.05)


@pytest.mark.parametrize("fault", ["answers-500", "gone"])
def test_a_cache_that_fails_stops_the_farm_and_names_the_stage(scratch, fault):
    farm_dir = scratch / "farm"
    farm("up", "--dir", str(farm_dir), "--builders", "1")
    port = int(env_of(farm_dir)["FARM_CACHE_PORT"])
    stop_nginx(farm_dir)
    server = None
    if fault == "answers-500":
        server = HTTPServer(("127.0.0.1", port), Answer500)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = farm("build", "--dir", str(farm_dir), ATTR, check=False)
    finally:
        if server:
            server.shutdown()
    assert proc.returncode != 0, proc.stdout[-3000:]
    # The first stage built is not published, and nothing is built after it.
    assert "was built but not published, and the farm stopped there" in proc.stdout, proc.stdout[-3000:]
    assert "on builder b1" in proc.stdout and f"upload to the cache http://127.0.0.1:{port} failed" in proc.stdout, \
        proc.stdout[-3000:]
    rows = stages(farm_dir)
    assert "wordfreq-pgo-bolt" not in {r[0] for r in rows}, rows
    uploads = (farm_dir / "logs" / "uploads.tsv").read_text()
    assert "\tuploaded\t" not in uploads, uploads
    if fault == "gone":
        # The cache back: the next run builds the rest and publishes what the failed run built
        # (Nix runs no hook for a path it does not build).
        [(first, _, _, drv)] = rows
        assert "the cache of" in farm("up", "--dir", str(farm_dir)).stdout
        proc = farm("build", "--dir", str(farm_dir), ATTR)
        assert "is not in the cache: publishing it" in proc.stdout, proc.stdout[-3000:]
        for out in outputs(env_of(farm_dir)["FARM_CLIENT_STORE"], drv):
            assert f"\tuploaded\t{out}" in (farm_dir / "logs" / "uploads.tsv").read_text(), (first, out)
        assert farm("substitute", "--dir", str(farm_dir), ATTR).returncode == 0


def descendants(pid):
    children = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def test_a_builder_dying_mid_stage_is_named(scratch):
    farm_dir = scratch / "farm"
    farm("up", "--dir", str(farm_dir), "--builders", "1")
    log = farm_dir / "logs" / "build-1.log"
    proc = subprocess.Popen([str(FARM), "build", "--dir", str(farm_dir), ATTR], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Wait until pgo-engine (a cargo build of some seconds) runs on b1, then kill b1 whole: its
    # daemon and everything under it, as a machine that dies.
    deadline = time.time() + 600
    while time.time() < deadline:
        if log.exists() and "pgo-engine: cargo build" in log.read_text():
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("pgo-engine never started on b1")
    store = f"root={farm_dir}/builders/b1/store"
    daemons = [int(p.name) for p in pathlib.Path("/proc").iterdir() if p.name.isdigit()
               and store in (p / "cmdline").read_bytes().decode(errors="replace")]
    assert daemons
    for pid in {d for daemon in daemons for d in descendants(daemon)}:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode != 0, out[-3000:]
    assert "farm: stage pgo-engine on builder b1 failed" in out, out[-3000:]
