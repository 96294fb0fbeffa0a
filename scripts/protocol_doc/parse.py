import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path=os.environ.get("CAPTURED", os.path.join(HERE, "captured.txt"))):
    ex = {}
    section = "op"
    label = None
    req = None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("## "):
            section = line[3:]
        elif line.startswith("### "):
            label = line[4:]
            if label.startswith("refused store"):
                section = "op"
            req = None
        elif line.startswith("> "):
            req = line[2:] if req is None else req + "\n" + line[2:]
        elif line.startswith("< "):
            key = f"{section}/{label}"
            ex.setdefault(key, {"req": req, "resp": []})["resp"].append(line[2:])
    return ex


if __name__ == "__main__":
    import sys

    ex = load()
    if len(sys.argv) > 1:
        for k in sys.argv[1:]:
            e = ex[k]
            print(e["req"])
            for r in e["resp"]:
                print(json.dumps(json.loads(r), indent=2, ensure_ascii=False))
    else:
        for k in ex:
            print(k)
