"""The machine's identity, read through a root path: its GPUs (NVML, sysfs, PCI bus ids, the
visible-device lists), their NUMA nodes and the CPUs (cpulists). The ground floor: it imports
nothing of rig's but errors, so launch, observe and yolo all ask it."""
