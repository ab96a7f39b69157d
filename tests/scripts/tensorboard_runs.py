"""Prints each TensorBoard run under /workspace/runs/t and its scalar tags, one RUN line each."""

from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

m = EventMultiplexer().AddRunsFromDirectory("/workspace/runs/t")
m.Reload()
for run, tags in sorted(m.Runs().items()):
    print("RUN", run, sorted(tags["scalars"]))
