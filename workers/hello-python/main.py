"""hello-python: the script contract (docs/workers.md) in a few lines.

Reads its inputs from /airlock/input.json (already checked and with defaults
filled in by airlock), writes scalar outputs to /airlock/output/result.json
and file outputs at their declared paths under /airlock/output/. Whatever it
prints becomes the run's log.
"""

import json
import os

INPUT = "/airlock/input.json"
OUTPUT = "/airlock/output"


def main() -> None:
    with open(INPUT, encoding="utf-8") as f:
        args = json.load(f)

    greeting = f"Hello, {args['name']}!"
    if args["shout"]:
        greeting = greeting.upper()
    times = max(0, min(int(args["times"]), 1000))

    with open(os.path.join(OUTPUT, "report.txt"), "w", encoding="utf-8") as f:
        f.write((greeting + "\n") * times)
    with open(os.path.join(OUTPUT, "result.json"), "w", encoding="utf-8") as f:
        json.dump({"greeting": greeting}, f)

    print(f"greeted {args['name']!r} {times} time(s)")


if __name__ == "__main__":
    main()
