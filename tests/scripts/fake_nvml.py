"""A stand-in for the pynvml module: scripted GPUs, so telemetry and doctor run without a GPU.

Values follow pynvml's units (bytes, milliwatts). `fail_after` makes every read raise NVMLError
after that many utilisation reads, as when a GPU falls off the bus mid-run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_GPU_IS_LOST = 15
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRICS_GET_VERSION = 1


class c_nvmlGpmMetricsGet_t:
    def __init__(self) -> None:
        self.version = self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(16)]


@dataclass
class FakeGpu:
    name: str = "NVIDIA H200"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:17:00.0"
    utils: list[int] = field(default_factory=lambda: [50])  # cycled per read
    mem_used: list[int] = field(default_factory=lambda: [1 << 30])  # bytes, cycled per read
    power_mw: int | None = 300_000  # None: NotSupported
    temp_c: int = 40
    sm_mhz: int = 1980
    mem_mhz: int = 3201
    capability: tuple[int, int] = (9, 0)
    reads: int = 0
    minor: int = 0  # /dev/nvidia<minor>
    gpm: dict[int, float] | None = None  # GPM metric id -> percentage; None: no GPM (before Hopper)
    mem_total: int = 141 << 30  # bytes


class FakeNvml:
    """Passed where telemetry expects the pynvml module."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_GPM_METRIC_SM_UTIL = NVML_GPM_METRIC_SM_UTIL
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = NVML_GPM_METRIC_ANY_TENSOR_UTIL
    NVML_GPM_METRIC_DRAM_BW_UTIL = NVML_GPM_METRIC_DRAM_BW_UTIL
    NVML_GPM_METRICS_GET_VERSION = NVML_GPM_METRICS_GET_VERSION
    c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        driver: str = "550.54.15",
        init_error: int | None = None,
        fail_after: int | None = None,
    ) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.driver = driver
        self.init_error = init_error
        self.fail_after = fail_after
        self.reads = 0
        self.initialised = False

    def failing(self, name: str, error: Exception, after: int = 0) -> FakeNvml:
        """This module, its function `name` raising `error` from its call number after + 1 on."""
        real, calls = getattr(self, name), [0]

        def call(*args: Any) -> Any:
            calls[0] += 1
            if calls[0] > after:
                raise error
            return real(*args)

        setattr(self, name, call)
        return self

    def _check(self) -> None:
        if self.fail_after is not None and self.reads > self.fail_after:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, h: FakeGpu) -> bytes:
        return h.name.encode()  # old pynvml returns bytes; telemetry must decode

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return h.uuid

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGpu) -> tuple[int, int]:
        return h.capability

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
        return SimpleNamespace(busId=h.bus_id)

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        self.reads += 1
        h.reads += 1
        self._check()
        return SimpleNamespace(gpu=h.utils[(h.reads - 1) % len(h.utils)], memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:
        self._check()
        used = h.mem_used[(h.reads - 1) % len(h.mem_used)]
        return SimpleNamespace(used=used, total=h.mem_total, free=h.mem_total - used)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._check()
        if h.power_mw is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return h.power_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._check()
        return h.temp_c

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, kind: int) -> int:
        self._check()
        return h.sm_mhz if kind == NVML_CLOCK_SM else h.mem_mhz

    def nvmlDeviceGetMinorNumber(self, h: FakeGpu) -> int:
        return h.minor

    def nvmlGpmQueryDeviceSupport(self, h: FakeGpu) -> Any:
        return SimpleNamespace(isSupportedDevice=int(h.gpm is not None))

    def nvmlGpmSampleAlloc(self) -> Any:
        self.gpm_samples = getattr(self, "gpm_samples", 0) + 1  # alive, to check each is freed
        return SimpleNamespace(gpu=None)

    def nvmlGpmSampleGet(self, h: FakeGpu, sample: Any) -> Any:
        self._check()
        if h.gpm is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        sample.gpu = h
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.gpm_samples -= 1

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        gpm = request.sample2.gpu.gpm
        for slot in request.metrics[: request.numMetrics]:
            slot.nvmlReturn = 0 if slot.metricId in gpm else NVML_ERROR_NOT_SUPPORTED
            slot.value = gpm.get(slot.metricId, 0.0)
        return request
