"""The NPU as the runtime drives it: a made-up device that is the CPU underneath."""

from runtime.accelerators.cpu import CPUAccelerator


class NPUAccelerator(CPUAccelerator):
    """Every local rank computes on the CPU (``torch.device("cpu")``), with gloo between ranks."""

    @classmethod
    def device_count(cls) -> int:
        import os

        return len([entry for entry in os.environ.get("NPU_VISIBLE_DEVICES", "").split(",") if entry.strip()])
