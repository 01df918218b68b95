"""Findings per KB of tool output, per system, and a seeded sample of them to check by hand.

    .venv/bin/python scripts/sample_findings.py TRAJECTORIES.jsonl [...] --seed 2024 --n 50 \
        --out r.json

Every ``tool`` step of the trajectory files (the format of the benchmarks' trajectories) goes
through ``memory/ingest/findings.findings``, the rule ingestion uses to write Fact nodes.
Printed and written: the findings per KB of output, overall and per system, and ``--n``
findings drawn with ``random.Random(--seed)``, numbered, with their system and tool, for a
person to mark as facts or not (the precision reported in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

from gliding.memory.ingest.findings import findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    found: list[dict[str, str]] = []
    chars: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for path in args.files:
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            system = str(record.get("system", "?"))
            for step in record.get("steps", []):
                if step.get("role") != "tool":
                    continue
                output = step.get("content") or ""
                chars[system] += len(output)
                for f in findings(str(step.get("tool_name") or ""), output):
                    counts[system] += 1
                    found.append({"system": system, "tool": str(step.get("tool_name")),
                                  "text": f.text})
    total_kb = sum(chars.values()) / 1024
    result = {
        "findings": len(found), "kb": round(total_kb, 1),
        "per_kb": round(len(found) / total_kb, 2) if total_kb else 0.0,
        "systems": {s: {"findings": counts[s], "kb": round(chars[s] / 1024, 1),
                        "per_kb": round(counts[s] / (chars[s] / 1024), 2) if chars[s] else 0.0}
                    for s in sorted(chars)},
        "seed": args.seed,
        "sample": random.Random(args.seed).sample(found, min(args.n, len(found))),
    }
    print(f"{result['findings']} findings in {result['kb']} KB: {result['per_kb']} per KB")
    for system, row in result["systems"].items():
        print(f"  {system[:48]:48s} {row['findings']:5d}  {row['per_kb']:5.2f}/KB")
    for n, item in enumerate(result["sample"], 1):
        print(f"{n:3d} [{item['system'][:16]} {item['tool']}] {item['text']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
