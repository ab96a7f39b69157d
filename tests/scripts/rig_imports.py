"""Run `rig ARGS...` in this process, as the `rig` console script does, then print the modules it
loaded as the last line, in JSON: {"code": exit code, "modules": [...]}.

    python -I /tests/rig_imports.py --version
"""

import json
import sys

from rig.cli import main

try:
    code = main(sys.argv[1:])
except SystemExit as e:  # --version and --help exit from argparse
    code = e.code if isinstance(e.code, int) else 1
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
