"""Every part the pinned agents send has a rule in docs/translation-policy.md.

Reads the committed captures (tests/agents/captures/, written by tests/agents/capture.py) and the
tables of docs/translation-policy.md; needs no agent installed, so it runs wherever the suite
does. A new agent version is re-captured with one command; its new fields, betas and headers then
fail here, named, until the policy gives each a rule.
"""

import importlib.util
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DOC = ROOT / "docs" / "translation-policy.md"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"agents_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


parts = _load("parts")
agents = _load("agents")


def test_every_captured_part_has_a_rule():
    missing = {}
    for cap, section, part in parts.uncovered(DOC.read_text()):
        missing.setdefault((section, part), []).append(cap[:-len(".json")])
    assert not missing, (
        f"{len(missing)} captured part(s) have no row in {DOC.relative_to(ROOT)}:\n"
        + "\n".join(f"  [{section}] {part}  (sent by {', '.join(caps)})"
                     for (section, part), caps in sorted(missing.items())))


def test_the_pinned_versions_are_captured_in_every_mode():
    """package-lock.json's versions each have a capture of every mode (a version bump without a
    re-capture fails here)."""
    names = {name for name, _ in parts.captures()}
    package = {"claude": "claude-code", "codex": "codex"}
    for agent, modes in agents.MODES.items():
        version = agents.locked_version(agent)
        for mode in modes:
            assert f"{package[agent]}-{version}/{mode}.json" in names, (
                f"no capture of {agent} {version} in mode {mode}: run tests/agents/capture.py")


def test_each_capture_ran_its_tool_round_trip():
    """A capture whose session failed records only part of what the agent sends: each one's
    agent exited 0 and sent a tool result back."""
    for name, cap in parts.captures():
        assert cap["exit"] == 0, name
        seen = set(cap["types"].get("messages[].content[]", [])) | set(
            cap["types"].get("input[]", []))
        assert seen & {"tool_result", "function_call_output"}, f"{name}: no tool result"


def test_coverage_rules():
    """How a row covers a part (parts.covered), on a table of this test's own."""
    doc = "\n".join([
        "## Headers", "| header | native |", "|---|---|", "| `x-stainless-*`, `accept` | kept |",
        "## Anthropic betas", "| beta | rule |", "|---|---|", "| `context-management-*` | x |",
        f"## {parts.ROUTE['claude-code']}", "| part | rule | drop |", "|---|---|---|",
        "| `metadata.*` | `user` (not a part: not in the first cell) | |",
        "| `tools[].defer_loading`, `tools.custom` | refused | `x` |",
        "| `thinking.type=adaptive` | mapped | |",
    ])
    tokens = parts.doc_tokens(doc)
    route = parts.ROUTE["claude-code"]
    assert tokens[route] == {"metadata.*", "tools[].defer_loading", "tools.custom",
                             "thinking.type=adaptive"}

    def covered(part, section=route):
        return parts.covered(part, tokens[section], section)

    assert covered("metadata") and covered("metadata.user_id")
    assert not covered("metadata_x") and not covered("user")
    assert covered("tools.custom") and covered("tools.custom.defer_loading")
    assert covered("tools.web_search.defer_loading") and not covered("tools.custom.name")
    assert covered("thinking.type=adaptive") and not covered("thinking.type=enabled")
    assert covered("x-stainless-lang", parts.HEADERS) and covered("accept", parts.HEADERS)
    assert not covered("accept-encoding", parts.HEADERS)
    assert covered("context-management-2025-06-27", parts.BETAS)
