"""Training launches: plan each rank's GPU/CPU/memory binding, decide the GPU
environment and the nodes, exec torchrun; per rank, the binder and the trainer."""
