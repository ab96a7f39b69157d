"""The run's GPUs as Prometheus gauges, read from NVML at each scrape.

Names, units and labels are dcgm-exporter's for the fields that mean the same thing, so dashboards
built for it (Grafana 12239) work unchanged; GPM activity (Hopper and newer) is rig's own
`rig_gpu_*`, never DCGM_FI_PROF_*: NVML's GPM is not DCGM's profiling module and need not agree
with it. Under Slurm every series carries dcgm-exporter's `hpc_job` label.
"""

from __future__ import annotations

import importlib
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rig import log
from rig.errors import RigError
from rig.hardware.nvml import Nvml, describe_error
from rig.instrument import telemetry
from rig.instrument.failures import Failures

LOG = log.get("metrics")

# (name, help as dcgm-exporter writes it, the Nvml.read() field or "fb_free_mib")
DCGM_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "mem_clock_mhz"),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temp_c"),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w"),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util_pct"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "mem_used_mib"),
)
# (name, help, NVML_GPM_METRIC_* id): NVML gives percentages, Prometheus ratios.
GPM_GAUGES: tuple[tuple[str, str, int], ...] = (
    ("rig_gpu_sm_active_ratio", "Share of the SMs busy since the last scrape (NVML GPM SM_UTIL).", 2),
    ("rig_gpu_tensor_active_ratio", "Share of time any tensor core was busy (NVML GPM ANY_TENSOR_UTIL).", 5),
    ("rig_gpu_dram_active_ratio", "DRAM bandwidth used over its peak (NVML GPM DRAM_BW_UTIL).", 10),
)
LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")


@dataclass
class GpuReading:
    labels: dict[str, str]
    values: dict[str, float | None]
    gpm: dict[int, float] = field(default_factory=dict)


def labels_for(
    number: int, uuid: str, bus_id: str, minor: int | None, model: str, environ: Mapping[str, str]
) -> dict[str, str]:
    """dcgm-exporter's labels; `gpu` is the GPU's number in the run, as rig train and telemetry say."""
    out = {
        "gpu": str(number),
        "UUID": uuid,
        "pci_bus_id": bus_id,
        "device": f"nvidia{number if minor is None else minor}",
        "modelName": model,
        # dcgm-exporter's: the node's name where Kubernetes gives it, else the host name.
        "Hostname": environ.get("NODE_NAME") or socket.gethostname(),
    }
    if environ.get("SLURM_JOB_ID"):
        out["hpc_job"] = environ["SLURM_JOB_ID"]
    return out


def families(readings: Sequence[GpuReading]) -> list[Any]:
    """The gauge families for these readings; a value NVML could not read is left out."""
    core: Any = importlib.import_module("prometheus_client.core")
    out = []
    for name, help_text, key in DCGM_GAUGES:
        fam = None
        for r in readings:
            value = r.values.get(key)
            if value is None:
                continue
            fam = fam or core.GaugeMetricFamily(name, help_text, labels=list(r.labels))
            fam.add_metric(list(r.labels.values()), value)
        if fam is not None:
            out.append(fam)
    for name, help_text, metric_id in GPM_GAUGES:
        fam = None
        for r in readings:
            if metric_id not in r.gpm:
                continue
            fam = fam or core.GaugeMetricFamily(name, help_text, labels=list(r.labels))
            fam.add_metric(list(r.labels.values()), r.gpm[metric_id] / 100.0)
        if fam is not None:
            out.append(fam)
    return out


class GpuCollector:
    """A prometheus-client collector over NVML for the run's GPUs; one NVML read per scrape."""

    def __init__(self, nvml: Nvml, gpus: Sequence[tuple[int, int, dict[str, str]]]) -> None:
        self._nvml = nvml
        self._gpus = list(gpus)  # (NVML index, run number, labels)
        self._lock = threading.Lock()
        self._gpm_last: dict[int, Any] = {}
        self.failures = Failures("GPU sampling", LOG, "those series are left out, the run goes on")
        for index, _, _ in self._gpus:
            if nvml.gpm_supported(index):
                try:
                    self._gpm_last[index] = nvml.gpm_sample(index)
                except nvml.error:  # GPM listed but not usable here (a container without the capability)
                    continue

    @property
    def count(self) -> int:
        return len(self._gpus)

    @classmethod
    def open(cls, environ: Mapping[str, str], module: Any | None = None) -> GpuCollector | None:
        """The collector for the run's GPUs; None without NVML or without a GPU (no error, no series)."""
        nvml, _ = Nvml.open(module)
        if nvml is None:
            return None
        try:
            chosen = telemetry.nvml_run_gpus(nvml, environ)
            gpus = []
            for number, info in chosen:
                try:
                    minor: int | None = nvml.minor_number(info.index)
                except nvml.error:  # NotSupported (WSL, some vGPUs): the run's number names it
                    minor = None
                labels = labels_for(number, info.uuid, nvml.pci_bus_id(info.index), minor, info.name, environ)
                gpus.append((info.index, number, labels))
        except (RigError, nvml.error) as e:  # a CUDA_VISIBLE_DEVICES NVML cannot match, a GPU lost
            LOG.info("no GPU series on /metrics (%s); the run goes on", describe_error(e))
            gpus = []
        if not gpus:
            nvml.close()
            return None
        return cls(nvml, gpus)

    def readings(self) -> list[GpuReading]:
        with self._lock:
            out = []
            for index, number, labels in self._gpus:
                values, errors = self._nvml.read(index)
                if errors:
                    self.failures.add(f"NVML error on GPU {number} ({'; '.join(errors)})")
                try:
                    values["fb_free_mib"] = self._nvml.fb_free_mib(index)
                except self._nvml.error as e:
                    self.failures.add(f"NVML error on GPU {number} (fb_free_mib: {describe_error(e)})")
                    values["fb_free_mib"] = None
                out.append(GpuReading(labels, values, self._gpm(index, number)))
            return out

    def _gpm(self, index: int, number: int) -> dict[int, float]:
        last = self._gpm_last.pop(index, None)
        if last is None:
            return {}
        try:
            now = self._nvml.gpm_sample(index)
        except self._nvml.error as e:
            self.failures.add(f"NVML error on GPU {number} (GPM sample: {describe_error(e)})")
            self._nvml.gpm_free(last)
            return {}
        self._gpm_last[index] = now
        try:
            return self._nvml.gpm_metrics(last, now, [metric_id for _, _, metric_id in GPM_GAUGES])
        except self._nvml.error as e:
            self.failures.add(f"NVML error on GPU {number} (GPM metrics: {describe_error(e)})")
            return {}
        finally:
            self._nvml.gpm_free(last)

    def collect(self) -> Iterator[Any]:
        try:
            readings = self.readings()
        except self._nvml.error as e:  # a GPU fell off the bus mid-run: this scrape has no GPU series
            self.failures.add(f"NVML error ({describe_error(e)})")
            return
        yield from families(readings)

    def close(self) -> None:
        with self._lock:
            for sample in self._gpm_last.values():
                self._nvml.gpm_free(sample)
            self._gpm_last.clear()
            self._nvml.close()
        self.failures.report()
