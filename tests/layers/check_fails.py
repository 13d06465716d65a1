#!/usr/bin/env python3
"""scripts/check-layers fails on bad_tree/, naming its upward include and its include cycle."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
checker = os.path.join(here, "..", "..", "scripts", "check-layers")
run = subprocess.run([sys.executable, checker, "--root", os.path.join(here, "bad_tree")],
                     capture_output=True, text=True)
report = run.stderr
print(report)
expected = [
    'src/low/base.h:3: includes "high/widget.h" (src/high/widget.h, in src/high), which src/low/',
    "include cycle: src/high/gadget.h (line 3) -> src/high/widget.h (line 4) -> src/high/gadget.h",
]
missing = [e for e in expected if e not in report]
if run.returncode == 0 or missing:
    print(f"check-layers exited {run.returncode}; missing from its report: {missing}")
    sys.exit(1)
