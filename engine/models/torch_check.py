"""Is the installed torch a CUDA build on a machine without an NVIDIA GPU? Then it cost GBs of `nvidia-*`
packages for nothing, and the README's CPU install command is what the user wanted.

Read from package metadata and /dev, never by importing torch (~6 s): the service checks it at start and in
`status`; the CLI's fast path never calls it.
"""

from __future__ import annotations

import glob
from importlib import metadata

# The README's set-up line (the CPU build's own version from PyTorch's index, or pip's find-links; one retry, a
# 10 s stall limit: an unreachable index fails in seconds), reinstalling only torch over the CUDA build.
CPU_INSTALL = ("pip install torch=={version}+cpu --extra-index-url https://download.pytorch.org/whl/cpu --retries 1"
               " --timeout 10 --force-reinstall --no-deps")


def cuda_build_warning(version: str, requires: list[str], installed: set[str], gpu: bool) -> str | None:
    """The warning for a torch `version` whose `requires` name packages of which `installed` holds some, on a
    machine with or without a `gpu`; None when the build fits the machine."""
    if gpu or "+cpu" in version:
        return None
    nvidia = sorted({r.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
                     for r in requires if r.lower().startswith("nvidia-")} & installed)
    if "+cu" not in version and not nvidia:
        return None
    base = version.split("+", 1)[0]
    return (f"torch {version} is a CUDA build" + (f" ({len(nvidia)} nvidia-* packages)" if nvidia else "")
            + " but this machine has no NVIDIA GPU: embeddings run on the CPU anyway. For the CPU build (no "
            + f"nvidia-* packages, far smaller): {CPU_INSTALL.format(version=base)}"
            + (", then `pip uninstall` the nvidia-* packages" if nvidia else ""))


def torch_warning() -> str | None:
    """`cuda_build_warning` for the torch installed here (None without torch)."""
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None
    requires = metadata.requires("torch") or []
    installed = {(d.metadata["Name"] or "").lower() for d in metadata.distributions()}
    return cuda_build_warning(version, requires, installed, gpu=has_nvidia_gpu())


def has_nvidia_gpu() -> bool:
    """An NVIDIA device node or driver is present (Linux); elsewhere, assume a GPU rather than warn wrongly."""
    import sys

    if not sys.platform.startswith("linux"):
        return True
    return bool(glob.glob("/dev/nvidia[0-9]*")) or bool(glob.glob("/proc/driver/nvidia/gpus/*"))
