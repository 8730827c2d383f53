"""Every way the chain can fail, failing closed: each composition in nix/tests/fail-closed.nix
breaks one input of a real stage, and the build must fail naming the stage and the cause."""

import pytest

from nixchain import offline_build

CASES = {
    "training-without-instrumentation": ("stage gateway-training", "no profile file above"),
    "training-gateway-exits-nonzero": ("stage gateway-training", "did not exit cleanly after SIGTERM: exit status 3"),
    "training-without-redis-server": ("stage gateway-training", "chat-minimal-shared-limits: starting its Redis: running /nonexistent/redis-server"),
    "profile-from-corrupt-profraw": ("stage gateway-profile", "llvm-profdata merge rejected"),
    "profile-with-wrong-llvm-profdata": ("stage toolchain-versions", "is LLVM 14"),
    "bolt-without-runtime-library": ("stage gateway-bolt-instrumented", "BOLT runtime library"),
    "bolt-too-old": ("stage toolchain-versions", "BOLT 19 or newer is required"),
    # The optimized legs' requests fail: an invalid batch (nix/tests/fail-closed.nix).
    "holdout-invalid-batch": ("stage gateway-holdout", "the bench batch is INVALID"),
}

# What a composition needs from the builder besides the defaults.
BUILD_ARGS = {
    "holdout-invalid-batch": ("--option", "extra-system-features", "gateway-benchmark"),
}


@pytest.mark.parametrize("attr", sorted(CASES))
def test_fails_closed(attr):
    extra = BUILD_ARGS.get(attr, ())
    proc = offline_build("-f", "nix/tests/fail-closed.nix", attr, "--no-out-link", *extra, check=False)
    assert proc.returncode != 0, f"{attr} built, but must fail:\n{proc.stdout[-3000:]}"
    stage, cause = CASES[attr]
    assert stage in proc.stdout, proc.stdout[-3000:]
    assert cause in proc.stdout, proc.stdout[-3000:]
