"""`python -m rig.workstation.labserver ARGS`: JupyterLab, started about twice as fast.

jsonschema imports `rfc3987_syntax` when it is installed (nbformat's `format-nongpl` extra pulls it
in), and that module compiles ~35 Lark parsers at import: seconds of the server's start on a busy
box, for an `iri` format no Jupyter schema uses (jupyter_server issue #1559). Marking it absent
makes jsonschema skip that one checker in this process only; kernels are separate processes and
keep it.
"""

import sys


def main() -> int:
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # `import` now raises ImportError
    from jupyterlab.labapp import main as lab_main  # type: ignore[import-not-found,unused-ignore]

    lab_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
