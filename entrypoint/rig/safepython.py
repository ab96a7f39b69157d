"""How rig starts Python: never with the current folder (or a script's) first on `sys.path`.

`python -m NAME` puts the current folder first on `sys.path`, so a `rig/`, `torch/` or
`ultralytics/` package left in /workspace (where `make train` and `docker exec` start) would be
imported instead of ours, with the caller's rights: root's under RIG_USER=root. `-P` (Python 3.11)
leaves it out and is inherited by the interpreters Python itself starts (multiprocessing's spawn).
"""

JOB = ("-P",)  # jobs (torchrun, the binder, the trainer): PYTHONPATH and the user's site still count
# Services (JupyterLab): isolated: no current folder, no PYTHON* variables, no user site
# (~/.local), whose .pth files would run in the server at every start.
SERVICE = ("-I",)


def module(python: str, name: str, flags: tuple[str, ...] = JOB) -> list[str]:
    """The argv that runs module `name` with `python`, safely."""
    return [python, *flags, "-m", name]
