#!/usr/bin/env python3
"""A/B start-up comparison of two airlock binaries (e.g. before and after a
change), with scripts/bench's own timing and round-robin interleaving, so
that machine load affects both alike.

Usage: scripts/bench_ab.py BEFORE_BINARY AFTER_BINARY [RUNS]
Prints one Markdown table per command (/bin/true, python3 -c pass) with the
default driver and --driver landlock for each binary.
"""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path


def load_bench():
    path = Path(__file__).resolve().parent / "bench"
    loader = importlib.machinery.SourceFileLoader("bench", str(path))
    spec = importlib.util.spec_from_loader("bench", loader)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = mod
    loader.exec_module(mod)
    return mod


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    before, after = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    b = load_bench()
    for title, cmd in [("/bin/true", ["/bin/true"]), ("python3 -c pass", [b.PYTHON, "-c", "pass"])]:
        cases = []
        for label, binary in (("before", before), ("after", after)):
            cases.append(b.Case(f"{label} (namespaces)", [binary, "sandbox", "exec", "--"] + cmd))
            cases.append(b.Case(f"{label} (--driver landlock)", [binary, "sandbox", "exec", "--driver", "landlock", "--"] + cmd))
        b.run_group("A/B: " + title, b.Case("bare " + title, cmd), cases, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
