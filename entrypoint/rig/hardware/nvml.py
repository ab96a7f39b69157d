"""NVML, the NVIDIA driver's management library: rig's one way to ask it (telemetry, `rig doctor`,
`rig bench`, the GPU list of rig.hardware.topology, and the memory `rig train` sizes the batch from).

pynvml (nvidia-ml-py) is imported on first use, and the module is injectable: tests pass a fake
with the same functions, so neither a GPU nor the package is needed on the host. `session` pairs
every init with its shutdown.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

GPU_FIELDS: tuple[str, ...] = (
    "util_pct",
    "mem_used_mib",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str


class Nvml:
    """The few NVML reads telemetry and `rig doctor` need, over an injectable pynvml-like module."""

    def __init__(self, module: Any) -> None:
        self.m = module
        self._handles: dict[int, Any] = {}

    @classmethod
    def open(cls, module: Any | None = None) -> tuple[Nvml | None, str]:
        """Initialise NVML; (None, why) when there is no library, no driver or no GPU."""
        try:
            m = module if module is not None else _import_pynvml()
            m.nvmlInit()
        except Exception as e:  # pynvml raises NVMLError_* subclasses; ImportError without the package
            return None, f"NVML unavailable ({describe_error(e)})"
        return cls(m), "ok"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.m.nvmlShutdown()

    @property
    def error(self) -> type[Exception]:
        """What NVML's calls raise: pynvml's NVMLError (each return code is a subclass of it)."""
        error: type[Exception] = self.m.NVMLError
        return error

    def driver_version(self) -> str:
        return _text(self.m.nvmlSystemGetDriverVersion())

    def gpus(self) -> list[GpuInfo]:
        out = []
        for index in range(int(self.m.nvmlDeviceGetCount())):
            handle = self.m.nvmlDeviceGetHandleByIndex(index)
            self._handles[index] = handle
            out.append(
                GpuInfo(
                    index, _text(self.m.nvmlDeviceGetName(handle)), _text(self.m.nvmlDeviceGetUUID(handle))
                )
            )
        return out

    def capability(self, index: int) -> tuple[int, int]:
        """CUDA compute capability, (9, 0) for an H100/H200, (12, 0) for an RTX 5090."""
        major, minor = self.m.nvmlDeviceGetCudaComputeCapability(self._handle(index))
        return int(major), int(minor)

    def pci_bus_id(self, index: int) -> str:
        """As NVML writes it: 00000000:18:00.0."""
        return _text(self.m.nvmlDeviceGetPciInfo(self._handle(index)).busId)

    def utilization(self, index: int) -> float:
        """The GPU's busy percentage over NVML's last sample period."""
        return float(self.m.nvmlDeviceGetUtilizationRates(self._handle(index)).gpu)

    def read(self, index: int) -> tuple[dict[str, float | None], list[str]]:
        """One sample of every GPU field; a field NVML cannot read is None, its error returned."""
        h = self._handle(index)
        m = self.m
        readers: dict[str, Callable[[], float]] = {
            "util_pct": lambda: self.utilization(index),
            "mem_used_mib": lambda: float(m.nvmlDeviceGetMemoryInfo(h).used) / 2**20,
            "power_w": lambda: float(m.nvmlDeviceGetPowerUsage(h)) / 1000.0,
            "temp_c": lambda: float(m.nvmlDeviceGetTemperature(h, m.NVML_TEMPERATURE_GPU)),
            "sm_clock_mhz": lambda: float(m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_SM)),
            "mem_clock_mhz": lambda: float(m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_MEM)),
        }
        values: dict[str, float | None] = {}
        errors: list[str] = []
        for name, read in readers.items():
            try:
                values[name] = read()
            except Exception as e:  # NotSupported on some boards, GpuIsLost, a driver reload...
                values[name] = None
                if not _not_supported(m, e):
                    errors.append(f"{name}: {describe_error(e)}")
        return values, errors

    def memory(self, index: int) -> tuple[int, int]:
        """The GPU's (total, free) framebuffer memory, bytes."""
        info = self.m.nvmlDeviceGetMemoryInfo(self._handle(index))
        return int(info.total), int(info.free)

    def fb_free_mib(self, index: int) -> float:
        """Framebuffer memory not in use, MiB (what dcgm-exporter's DCGM_FI_DEV_FB_FREE reports)."""
        return float(self.m.nvmlDeviceGetMemoryInfo(self._handle(index)).free) / 2**20

    def minor_number(self, index: int) -> int:
        """N of the GPU's /dev/nvidiaN."""
        return int(self.m.nvmlDeviceGetMinorNumber(self._handle(index)))

    # GPM (Hopper and newer): activity over the time between two samples, as DCGM's profiling fields.
    def gpm_supported(self, index: int) -> bool:
        try:
            return bool(self.m.nvmlGpmQueryDeviceSupport(self._handle(index)).isSupportedDevice)
        except Exception:  # an older driver or pynvml without GPM, a vGPU...
            return False

    def gpm_sample(self, index: int) -> Any:
        """A GPM sample taken now; pass two to gpm_metrics, then gpm_free each."""
        sample = self.m.nvmlGpmSampleAlloc()
        try:
            return self.m.nvmlGpmSampleGet(self._handle(index), sample)
        except Exception:
            self.gpm_free(sample)
            raise

    def gpm_free(self, sample: Any) -> None:
        with contextlib.suppress(Exception):
            self.m.nvmlGpmSampleFree(sample)

    def gpm_metrics(self, first: Any, second: Any, metric_ids: Sequence[int]) -> dict[int, float]:
        """The GPM metrics (NVML_GPM_METRIC_* ids, percentages) between two samples; a metric NVML
        cannot compute is left out."""
        request = self.m.c_nvmlGpmMetricsGet_t()
        request.version = self.m.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metric_ids)
        request.sample1, request.sample2 = first, second
        for slot, metric_id in enumerate(metric_ids):
            request.metrics[slot].metricId = metric_id
        result = self.m.nvmlGpmMetricsGet(request)
        return {
            int(result.metrics[slot].metricId): float(result.metrics[slot].value)
            for slot in range(len(metric_ids))
            if int(result.metrics[slot].nvmlReturn) == 0
        }

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self.m.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]


@contextlib.contextmanager
def session(module: Any | None = None) -> Iterator[tuple[Nvml | None, str]]:
    """Nvml.open() for the length of a block, shut down after it however the block ends."""
    nvml, state = Nvml.open(module)
    try:
        yield nvml, state
    finally:
        if nvml is not None:
            nvml.close()


def _import_pynvml() -> ModuleType:
    # nvidia-ml-py, imported on use so `rig` stays importable without it.
    return importlib.import_module("pynvml")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def describe_error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _not_supported(module: Any, e: Exception) -> bool:
    code = getattr(module, "NVML_ERROR_NOT_SUPPORTED", None)
    return code is not None and getattr(e, "value", None) == code
