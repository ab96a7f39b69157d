"""The rank's side of rig's trainer (rig.yolo.trainer.Rank): what belongs to the process under
torchrun rather than to Ultralytics.

- The stop: a stop signal only sets `StopFlag` (the handler acts on nothing else); the ranks agree
  on it between batches with one all-reduce every ddp.STOP_CHECK_EVERY batches, so every rank stops
  at the same batch boundary whichever got the signal.
- The process group (Ultralytics' own `_setup_ddp` forces TORCH_NCCL_BLOCKING_WAIT=1 and a 3-hour
  timeout: rig.launch.ddp decides the backend and timeout), CPU ranks' corrections
  (rig.launch.cpuddp), SyncBatchNorm (rig.launch.syncbn), the checkpoint interval and atomic writes
  in the run's file mode (rig.launch.checkpoints).
- Which features the installed Ultralytics has the names for (rig.yolo.contractcheck).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from rig import log, rankenv
from rig.launch import checkpoints, cpuddp, ddp, resumecopy, steplevers, syncbn
from rig.yolo import contract

if TYPE_CHECKING:
    from rig.yolo.trainer import RigTrainer
    from rig.yolo.trainer.saves import Data

_logger = log.get("trainer")


class StopFlag:
    """Set by the signal handler, read by the training loop: handlers never act themselves, except
    that a second Ctrl-C stops at once (the way out of a run that will not reach its next batch)."""

    def __init__(self) -> None:
        self.signum = 0

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = self.signum or signum


STOP = StopFlag()


def _dist() -> Any:
    return importlib.import_module("torch.distributed")


def _torch() -> Any:
    return importlib.import_module("torch")


class LaunchRank:
    """One rank under torchrun (or the one process of a CPU run): rig.yolo.trainer.Rank."""

    def __init__(
        self,
        environ: Mapping[str, str] = os.environ,
        *,
        stop: StopFlag = STOP,
        checkpoint_every: float = float(ddp.CHECKPOINT_EVERY_S),
        features_on: Callable[[contract.Feature], bool] = lambda _f: True,
    ) -> None:
        self._environ = environ
        self._stop = stop
        self._every = checkpoint_every
        self._features_on = features_on
        self._batches = 0  # training batches seen: the stop check runs on the same ones on every rank

    # ---- who --------------------------------------------------------------------------------------
    def world_size(self) -> int:
        return rankenv.world_size(self._environ)

    def index(self) -> int:
        return rankenv.rank(self._environ)

    def is_first(self) -> bool:
        return self.index() == 0

    def feature_on(self, feature: contract.Feature) -> bool:
        return self._features_on(feature)

    def named(self, loaded: str) -> str:
        return resumecopy.named(self._environ, loaded)

    # ---- the agreed stop --------------------------------------------------------------------------
    def distributed(self) -> bool:
        dist = _dist()
        return bool(dist.is_available() and dist.is_initialized())

    def agree(self, trainer: contract.Trainer, local: int) -> int:
        """The largest of the ranks' values (one all-reduce); local alone without a process group."""
        if not self.distributed():
            return local
        dist = _dist()
        flag = _torch().tensor([local], device=trainer.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def agreed_stop(self, trainer: contract.Trainer) -> int:
        """The stop signal every rank agrees on once any rank got one (the largest number, if
        several); 0: none. Under DDP the ranks compare their signals every ddp.STOP_CHECK_EVERY
        batches (an all-reduce and a host sync), all on the same batches, so a rank that got none
        knows which."""
        self._batches += 1
        if not ddp.stop_check_due(self._batches, self.distributed()):
            return 0
        return self.agree(trainer, self._stop.signum)

    def agreed_stop_in_validation(self, trainer: contract.Trainer, done: int, common: int) -> int:
        """As agreed_stop, during a validation pass: only on batches every rank has (`common`, the
        fewest of any rank: the ranks' shares of the validation set differ by a batch)."""
        distributed = self.distributed()
        if distributed and done > common:
            return 0
        if not ddp.stop_check_due(done, distributed):
            return 0
        return self.agree(trainer, self._stop.signum)

    def fewest(self, trainer: contract.Trainer, count: int) -> int:
        return -self.agree(trainer, -count) if self.distributed() else count

    def checkpoint_every(self) -> float:
        return self._every

    # ---- the process group ------------------------------------------------------------------------
    def setup_ddp(self, trainer: contract.Trainer) -> None:
        # Ultralytics' own sets TORCH_NCCL_BLOCKING_WAIT=1 and a 3-hour timeout (see rig.launch.ddp).
        torch, dist = _torch(), _dist()
        on_cpu = str(trainer.device) == "cpu"
        setup = ddp.ddp_setup(
            self._environ,
            str(trainer.args.device),
            rankenv.local_rank(self._environ),
            torch.cuda.is_available() and not on_cpu,
        )
        if setup.device_index is not None:
            torch.cuda.set_device(setup.device_index)
            trainer.device = torch.device("cuda", setup.device_index)
            trainer.accelerator = torch.cuda
        # Without the blocking wait, torch's own async error handling (its default, 3: abort the
        # communicators and end the process without their clean-up) ends a job stuck on a lost rank.
        os.environ.pop("TORCH_NCCL_BLOCKING_WAIT", None)
        dist.init_process_group(
            backend=setup.backend,
            timeout=timedelta(seconds=setup.timeout_s),
            rank=self.index(),
            world_size=trainer.world_size,
        )
        if self.is_first():
            _logger.info(
                "process group: %s, %d ranks; a stuck collective fails the job after %d s (%s)",
                setup.backend,
                trainer.world_size,
                setup.timeout_s,
                ddp.NCCL_TIMEOUT_ENV,
            )

    def best_on_every_rank(self, trainer: contract.Trainer) -> bool:
        """Whether every rank sees best.pt, agreed by all (global rank 0's file decides for it too).
        Ultralytics lets each rank look for itself: a rank on a node without the run directory skips
        the final validation its peers run, and they wait for it in a collective until the timeout."""
        dist = _dist()
        seen = _torch().tensor([1 if trainer.best.exists() else 0], device=trainer.device)
        dist.all_reduce(seen, op=dist.ReduceOp.MIN)
        return bool(seen.item())

    # ---- CPU ranks ----------------------------------------------------------------------------------
    def cpu_setup_train(self) -> contextlib.AbstractContextManager[None]:
        return cpuddp.setup_train()

    def cpu_validation(self, validator: contract.Validator) -> contextlib.AbstractContextManager[None]:
        return cpuddp.validation(validator)

    # ---- levers -------------------------------------------------------------------------------------
    def sync_bn_wanted(self) -> bool:
        return self.feature_on(contract.LEVERS) and syncbn.wanted(self._environ)

    def fused_optimizer_wanted(self) -> bool:
        return self.feature_on(contract.LEVERS) and steplevers.fused_wanted(self._environ)

    def use_sync_batchnorm(self, trainer: RigTrainer) -> None:
        trainer.model, layers = syncbn.to_sync_batchnorm(trainer.model)
        trainer.rig_sync_bn = True
        trainer.add_callback("on_pretrain_routine_end", self.ema_with_plain_batchnorm)
        compiled = syncbn.compile_warning(layers, trainer.args.compile, _torch().__version__)
        if compiled and self.is_first():
            _logger.warning("%s", compiled)
        if self.is_first():
            _logger.info(
                "sync_bn: %d BatchNorm layers synchronised over the %d ranks (two small collectives each, "
                "every step); checkpoints keep plain BatchNorm2d",
                layers,
                trainer.world_size,
            )

    def keep_frozen_in_eval(self, trainer: contract.Trainer) -> None:
        syncbn.keep_frozen_in_eval(trainer.model, trainer.freeze_layer_names)

    def ema_with_plain_batchnorm(self, trainer: contract.Trainer) -> None:
        """The EMA (a copy of the model, and what Ultralytics saves) back to BatchNorm2d once it exists."""
        ema: contract.Ema | None = trainer.ema
        if ema is not None:
            ema.ema, _ = syncbn.to_batchnorm(ema.ema)

    # ---- writing checkpoints ----------------------------------------------------------------------
    def write(self, path: Path, data: Data) -> None:
        checkpoints.write(path, data)

    def atomic_strip(self, strip: Callable[..., Any], drop: Sequence[str]) -> Callable[..., Any]:
        return checkpoints.atomic_strip(strip, drop)
