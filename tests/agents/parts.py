"""The parts of the committed captures (tests/agents/captures/), named as
docs/translation-policy.md's tables name them, and which of those tables covers them.

A capture's parts, by the section of docs/translation-policy.md that must give each a rule:
- `Headers`: every header name;
- `Anthropic betas`: every `anthropic-beta` value (Claude Code);
- the route the agent's dialect is bridged on (Claude Code: Messages to Chat; Codex: Responses to
  Anthropic): every body path (`messages[].content[].cache_control`), every tool type and tool
  field (`tools.web_search`, `tools.web_search.external_web_access`; `custom` for an Anthropic
  tool without a type), and every `type` value at a path (`messages[].content[].type=tool_use`).

A row covers a part when one of the backticked tokens of its first cell is the part itself, or
`X.*` for a part `X` or below it (`metadata.*` covers `metadata` and `metadata.user_id`), or
`tools[].F` for the field F of a tool of any type; a header or beta token ending in `*` covers
every name that starts with what precedes it.
"""

import json
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
CAPTURES = HERE / "captures"

HEADERS = "Headers"
BETAS = "Anthropic betas"
# The route section each agent's dialect is bridged on.
ROUTE = {
    "claude-code": "Messages (Anthropic) client to a Chat Completions upstream",
    "codex": "Responses client to an Anthropic Messages upstream",
}


def captures():
    """Every committed capture: (relative file name, its JSON)."""
    return [(str(p.relative_to(CAPTURES)), json.loads(p.read_text()))
            for p in sorted(CAPTURES.glob("*/*.json"))]


def parts(cap):
    """CAP's parts as {section: set of part names}."""
    route = set()
    for p in cap["body_paths"]:
        if not p.startswith("tools[]"):  # tool parts are named by type below
            route.add(p)
    for kind, fields in cap["tools"].items():
        route.add(f"tools.{kind}")
        route.update(f"tools.{kind}.{f}" for f in fields if f != "type")
    for path, values in cap["types"].items():
        if path in ("tools[]", "tools[].tools[]"):
            continue  # tool types are `tools.<type>` above
        # `messages[].role` holds role values; every other path, `type` values.
        name = path if path.endswith(".role") else f"{path}.type"
        route.update(f"{name}={v}" for v in values)
    betas = {b.strip() for v in cap["headers"].get("anthropic-beta", []) for b in v.split(",")}
    return {HEADERS: set(cap["headers"]), BETAS: betas - {""}, ROUTE[cap["agent"]]: route}


def doc_tokens(text):
    """{section title: set of backticked tokens in the first cells of its tables' rows}."""
    out, section = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        if section is None or not line.startswith("|") or re.match(r"^\|\s*-", line):
            continue
        first = line.split("|")[1]
        out.setdefault(section, set()).update(re.findall(r"`([^`]+)`", first))
    return out


def covered(part, tokens, section):
    if part in tokens:
        return True
    if section in (HEADERS, BETAS):
        return any(t.endswith("*") and part.startswith(t[:-1]) for t in tokens)
    for t in tokens:
        if t.endswith(".*") and (part == t[:-2] or part.startswith(t[:-1])):
            return True
    m = re.match(r"^tools\.([^.]+)\.(.+)$", part)
    return bool(m and f"tools[].{m.group(2)}" in tokens)


def uncovered(doc_text):
    """[(capture, section, part)] for every captured part no row of DOC_TEXT covers."""
    tokens = doc_tokens(doc_text)
    missing = []
    for name, cap in captures():
        for section, names in parts(cap).items():
            have = tokens.get(section, set())
            missing += [(name, section, p) for p in sorted(names)
                        if not covered(p, have, section)]
    return missing


if __name__ == "__main__":
    # The plain list: each part with the captures (agent version/mode) that send it.
    seen = {}
    for name, cap in captures():
        for section, names in parts(cap).items():
            for p in names:
                seen.setdefault(section, {}).setdefault(p, []).append(name[:-5])
    for section in sorted(seen):
        print(f"\n### {section}\n")
        for p, where in sorted(seen[section].items()):
            print(f"- `{p}`: {', '.join(where)}")
