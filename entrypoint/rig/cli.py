"""`rig`: the image's entrypoint. Each command is a function returning an exit code.

Every command lives in its own module under rig/commands/, which exposes `register(subparsers)`.
The modules load lazily: the table below gives each command's name and one-line help, so `rig
--help` and `rig --version` import no command (nor logging), and `rig health` (the healthcheck,
every 10 s) imports only its own.
"""

import argparse
import importlib
import sys
from collections.abc import Sequence

from rig import program

# Each command's one-line help, in the order `rig --help` lists them; its module is
# rig.commands.<name> ('-' as '_'). tests/unit/test_cli.py checks each against its module.
COMMANDS: dict[str, str] = {
    "exec": "prepare the environment and run a command (the image's entrypoint)",
    "serve": "run sshd, JupyterLab and TensorBoard, supervised (the default command)",
    "health": "exit 0 when every service of `rig serve` answers (the healthcheck)",
    "demo-data": "generate a small YOLO detection dataset (shapes) in DIR",
    "weights": "fetch pretrained weights into /weights (the one step that downloads)",
    "datasets": "fetch Ultralytics' named datasets into /datasets (coco8.yaml ...)",
    "bench": "measure loader, train step and a short run; name the bottleneck",
    "yolo": "run the Ultralytics `yolo` CLI, first checking that model= and data= are on disk",
    "export": "export weights to ONNX (simplified) and check it against PyTorch with onnxruntime",
    "doctor": "check the box for what slows or breaks training; each problem comes with its fix",
    "plan": "print the GPU/CPU/memory binding plan for each local rank",
    "train": "train with Ultralytics on N GPUs: torchrun, NUMA binding, tuned args",
    "launch": "run your own per-rank program through torchrun and the binder",
    "env": "print the GPU environment: each variable, its value and why",
}


# The commands that write where the image does: before they run, the places a read-only image cannot
# write move to the user's own and the host's breaking variables go (rig.places). rig exec does the
# same for the command it execs; the others only read.
PREPARED = frozenset({"train", "launch", "bench", "yolo", "export", "doctor"})


def module_name(command: str) -> str:
    return "rig.commands." + command.replace("-", "_")


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command argv names: its first word that is not an option (rig's own options take no
    value); None when that is no command (argparse then says so)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the image's stack versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from rig import versions

        print(versions.describe())
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """rig's parser with `command`'s module loaded and registered; every other command is its name
    and help only (enough for `rig --help` and for argparse to name the choices)."""
    parser = argparse.ArgumentParser(prog="rig", description="The yolo-rig training box.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        if name == command:
            importlib.import_module(module_name(name)).register(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = chosen_command(argv)
    if command is not None:  # only a command logs: --version and --help need no logging
        from rig import log

        log.setup()
    parser = build_parser(command)
    args, extra = parser.parse_known_args(argv)
    # key=value arguments on both sides of an option (`rig train device=cpu --cpu-ranks 2 epochs=3`):
    # argparse ends a positional list at the first option; a command that says so takes the rest.
    intermixed = getattr(args, "intermixed", None)
    if extra and intermixed and not any(e.startswith("-") for e in extra):
        getattr(args, intermixed).extend(extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not hasattr(args, "func"):
        parser.print_help()
        return 2

    def run_command() -> int:
        if command in PREPARED:
            from rig import places

            places.prepare_process()
        code: int = args.func(args)
        return code

    return program.run(run_command)  # a RigError: one ERROR line, its exit code; Ctrl-C 130


if __name__ == "__main__":
    sys.exit(main())
