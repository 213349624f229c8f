"""Compare tests/golden/*.toml with a git revision (default HEAD): outcome changes, and changes other than the added main_address/main_port keys."""
import subprocess, sys, tomllib, pathlib
ADDED = {"main_address", "main_port"}
base = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
changed_outcome, other = [], []
for path in sorted(pathlib.Path("tests/golden").glob("*.toml")):
    try:
        old_text = subprocess.run(["git", "show", f"{base}:{path}"], capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError:
        print("NEW", path.name); continue
    old, new = tomllib.loads(old_text), tomllib.loads(path.read_text())
    oe, ne = old.get("expect", {}), new.get("expect", {})
    if {k: v for k, v in old.items() if k != "expect"} != {k: v for k, v in new.items() if k != "expect"}:
        other.append((path.name, "non-expect part changed"))
    if ("error" in oe) != ("error" in ne) or oe.get("error") != ne.get("error") and "error" in oe:
        changed_outcome.append((path.name, oe.get("error", "ok"), ne.get("error", "ok")))
        continue
    strip = lambda e: {k: ({kk: vv for kk, vv in v.items() if kk not in ADDED} if k == "rules" else v) for k, v in e.items() if k not in ADDED}
    if strip(oe) != strip(ne):
        diff = {k for k in set(oe) | set(ne) if strip(oe).get(k) != strip(ne).get(k)}
        other.append((path.name, f"keys differ: {sorted(diff)}"))
for c in changed_outcome: print("OUTCOME", *c)
for o in other: print("OTHER", *o)
print(f"{len(changed_outcome)} outcome changes, {len(other)} other changes")
