"""Render protocol.md.in into docs/protocol.md from captured.txt (the output of
../capture_protocol_examples.py).  Usage: python3 render.py protocol.md.in ../../docs/protocol.md

@@EX key | opts@@ lines become request/response blocks; @@PAIRS k1 ; k2@@ one NDJSON block.
"""

import json, re, sys

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from parse import load

EX = load()
SINGLE_LINE_MAX = 400
used = set()

WIDTH = 100


def smart(value, indent=0, lead=0, width=None):
    """Pretty JSON that keeps small objects and arrays on one line."""
    width = width or WIDTH
    flat = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if indent + lead + len(flat) <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            key = json.dumps(k, ensure_ascii=False) + ": "
            items.append(pad + key + smart(v, indent + 2, len(key), width))
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + smart(v, indent + 2, 0, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def get(obj, path):
    for part in path.split("."):
        obj = obj[part]
    return obj


def render(spec):
    parts = [p.strip() for p in spec.split("|")]
    key, opts = parts[0], parts[1:]
    if key not in EX:
        raise SystemExit(f"no example {key!r}")
    used.add(key)
    e = EX[key]
    notes = []
    pretty = any(o == "pretty" for o in opts)
    out = []
    req = e["req"]
    if "noreq" not in opts:
        out += ["Request:", "", "```json", req, "```", ""]
    for raw in e["resp"]:
        resp = json.loads(raw)
        changed = False
        for o in opts:
            if o.startswith("drop="):
                path = o[5:]
                parent, _, leaf = path.rpartition(".")
                container = get(resp, parent) if parent else resp
                if leaf in container:
                    del container[leaf]
                    changed = True
            elif o.startswith("trim="):
                path, n = o[5:].rsplit(":", 1)
                n = int(n)
                parent, _, leaf = path.rpartition(".")
                container = get(resp, parent) if parent else resp
                total = len(container[leaf])
                if total > n:
                    container[leaf] = container[leaf][:n]
                    notes.append(f"`{path}` is cut to its first {n} of {total} entries here.")
                    changed = True
        if pretty or len(raw) > SINGLE_LINE_MAX:
            text = smart(resp, width=150 if "wide" in opts else None)
        else:
            text = (
                raw if not changed else json.dumps(resp, separators=(",", ":"), ensure_ascii=False)
            )
        out += [
            "Response:" if len(e["resp"]) == 1 else "Responses (in order):",
            "",
            "```json",
            text,
            "```",
            "",
        ]
    for n in notes:
        out.append(f"*{n}*")
        out.append("")
    return "\n".join(out).rstrip("\n")


def render_pairs(keys):
    """@@PAIRS k1 ; k2 ; ...@@: one NDJSON block, request then response line each."""
    lines = []
    for key in [k.strip() for k in keys.split(";")]:
        e = EX[key]
        used.add(key)
        lines += e["req"].split("\n")
        lines += e["resp"]

    def valid(line):
        try:
            json.loads(line)
            return True
        except ValueError:
            return False

    fence = "```json" if all(valid(l) for l in lines) else "```text"
    return "\n".join([fence, *lines, "```"])


src = open(sys.argv[1], encoding="utf-8").read()


def sub(m):
    body = m.group(1)
    if body.startswith("PAIRS "):
        return render_pairs(body[6:])
    return render(body[3:])


text = re.sub(r"^@@((?:EX|PAIRS) .*?)@@$", sub, src, flags=re.M)
open(sys.argv[2], "w", encoding="utf-8").write(text)
print("examples used:", len(used), file=sys.stderr)
