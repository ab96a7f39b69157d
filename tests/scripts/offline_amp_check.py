"""Offline, the trainer's AMP check without its weights: skipped at once, never waiting on the network."""

from rig import log
from rig.yolo import trainer

log.setup()


def would_download(model):
    raise AssertionError("the check tried to load yolo26n.pt")


print("AMP", trainer.offline_safe_amp_check(would_download)(None))
