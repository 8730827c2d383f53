"""Every way the chain can fail, failing closed: each composition in nix/tests/fail-closed.nix
breaks one input of a real stage, and the build must fail naming the stage and the cause."""

import os

import pytest

from nixchain import offline_build

REFRESH = "nix/offline/refresh-profiles"

CASES = {
    "training-without-instrumentation": ("stage gateway-training", "no profile file above"),
    "training-gateway-exits-nonzero": ("stage gateway-training", "did not exit cleanly after SIGTERM: exit status 3"),
    "training-without-redis-server": ("stage gateway-training", "chat-minimal-shared-limits: starting its Redis: running /nonexistent/redis-server"),
    "training-with-corrupt-profraw": ("stage gateway-training", "llvm-profdata merge rejected"),
    "profile-with-wrong-llvm-profdata": ("stage toolchain-versions", "is LLVM 14"),
    "bolt-without-runtime-library": ("stage gateway-bolt-instrumented", "BOLT runtime library"),
    "bolt-too-old": ("stage toolchain-versions", "BOLT 19 or newer is required"),
    # Pinned profiles: missing, corrupt, of another toolchain or binary, stale.
    "release-check-trained-in-build": (
        "stage gateway-release-check",
        "trained in the build, not pinned",
        "no pinned llvm profile at profiles/x86_64-unknown-linux-gnu/rust-1.95.0/llvm",
        REFRESH,
    ),
    "pinned-llvm-profile-corrupt": ("stage gateway-profile", "is corrupt", "its manifest records", REFRESH),
    "pinned-llvm-profile-unreadable": ("stage gateway-profile", "is corrupt", "is not a llvm profile", REFRESH),
    "pinned-llvm-profile-other-toolchain": ("stage gateway-profile", "another key", "rustc 1.94.0", REFRESH),
    "pinned-llvm-profile-other-codegen": ("stage gateway-profile", "another key", "codegen.features", "mimalloc", REFRESH),
    "pinned-bolt-profile-other-toolchain": ("stage gateway-bolt-profile", "another major", "llvm_bolt 21.1.8", REFRESH),
    "pinned-bolt-profile-corrupt": ("stage gateway-bolt-profile", "is corrupt", REFRESH),
    "pinned-bolt-profile-stale-function": ("stage gateway-bolt-profile", "is stale", "whose code changed", "_ZN7gateway", REFRESH),
    "pinned-bolt-profile-function-missing": ("stage gateway-bolt-profile", "is stale", "this PGO binary lacks", "_renamed", REFRESH),
    "stale-llvm-profile": ("stage gateway-training", "is stale", "overlaps the pinned profile by", REFRESH),
    "stale-bolt-profile": ("stage gateway-bolt-training", "is stale", "overlaps the pinned profile by", REFRESH),
    "hot-function-edited-without-refresh": ("stage gateway-pgo", "hash mismatch", REFRESH),
    # No code changed, but the training's hot path moved (streaming shapes at a tenth).
    "hot-path-moved-llvm": ("stage gateway-training", "is stale", "in the counters the trainings on this builder agree on", REFRESH),
    "hot-path-moved-bolt": ("stage gateway-bolt-training", "is stale", "in the counters the trainings on this builder agree on", REFRESH),
    "hyper-function-edited-without-refresh": ("stage gateway-pgo", "hash mismatch", REFRESH),
    # Shapes removed: the coverage gate fails before the refresh trains, naming the combinations.
    "coverage-shapes-removed": (
        "stage gateway-coverage",
        "the training set does not cover the gateway's request paths",
        "no training shape for /v1/messages stream=true upstream=anthropic (native)",
        "no training shape with posture keys",
    ),
    # The library on another crate (the template's): its training command's failures, and a
    # published crate's source that is not as cargo vendored it.
    "library-training-command-fails": ("stage wordfreq-profile-fresh", "exited with status 3"),
    "library-training-leaves-no-profile": ("stage wordfreq-profile-fresh", "no profile file above"),
    "library-crate-not-as-vendored": ("stage wordfreq-source", "src/main.rs changed since vendoring"),
    # The optimized legs' requests fail: an invalid batch (nix/tests/fail-closed.nix).
    "holdout-invalid-batch": ("stage gateway-holdout", "the bench batch is INVALID"),
    # aarch64 (cross, trained under qemu-user): the cases that need no cross build of the gateway.
    "aarch64-bolt-with-x86_64-runtime": (
        "stage gateway-bolt-instrumented-aarch64",
        "is for 'Advanced Micro Devices X86-64', but the binary is for 'AArch64'",
    ),
    "aarch64-without-emulator": (
        "stage toolchain-versions-aarch64",
        "no emulator for aarch64-unknown-linux-gnu at '/nonexistent/qemu-aarch64-static'",
    ),
    "aarch64-training-without-emulator": (
        "stage gateway-instrumented-emulated-aarch64",
        "no emulator at /nonexistent/qemu-aarch64-static",
    ),
    "aarch64-profile-of-other-target": (
        "stage gateway-profile-aarch64",
        "another key",
        "target: \"x86_64-unknown-linux-gnu\" -> \"aarch64-unknown-linux-gnu\"",
        "nix/offline/refresh-profiles --aarch64",
    ),
}

# Cases that build the aarch64 gateway itself (cross fat-LTO builds, about 15 minutes each on 2
# cores): run by the aarch64 CI job (tests/run-aarch64), which sets AARCH64_CHAIN=1.
AARCH64_CHAIN_CASES = {
    "aarch64-training-without-profile": (
        "stage gateway-training-aarch64",
        "no profile file above",
    ),
}

# What a composition needs from the builder besides the defaults.
BUILD_ARGS = {
    "holdout-invalid-batch": ("--option", "extra-system-features", "gateway-benchmark"),
}


@pytest.mark.parametrize("attr", sorted(CASES) + sorted(AARCH64_CHAIN_CASES))
def test_fails_closed(attr):
    if attr in AARCH64_CHAIN_CASES and os.environ.get("AARCH64_CHAIN") != "1":
        pytest.skip("builds the aarch64 gateway: the aarch64 CI job (tests/run-aarch64) runs it")
    extra = BUILD_ARGS.get(attr, ())
    proc = offline_build("-f", "nix/tests/fail-closed.nix", attr, "--no-out-link", *extra, check=False)
    assert proc.returncode != 0, f"{attr} built, but must fail:\n{proc.stdout[-3000:]}"
    for needle in {**CASES, **AARCH64_CHAIN_CASES}[attr]:
        assert needle in proc.stdout, f"{needle!r} not in:\n{proc.stdout[-3000:]}"
