"""The machine's identity, read through a root path: its GPUs (NVML, sysfs, PCI bus ids, the
visible-device lists), their NUMA nodes, the CPUs (cpulists) and the fabric to other nodes (RDMA
devices, interfaces). The ground floor: it imports nothing of rig's but errors, so launch, observe
and yolo all ask it."""
