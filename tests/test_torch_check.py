"""The service's warning for a CUDA build of torch on a machine without a GPU (read from package metadata)."""

from engine.models.torch_check import cuda_build_warning, torch_warning

CUDA_REQUIRES = ["filelock", "nvidia-cublas-cu12==12.8.4.1; platform_system == \"Linux\"",
                 "nvidia-cudnn-cu12==9.10.2.21; platform_system == \"Linux\""]


def test_a_cuda_build_without_a_gpu_is_named_with_the_cpu_install_command():
    # the plain PyPI wheel on Linux: version without a suffix, pulling nvidia-* packages
    warning = cuda_build_warning("2.13.0", CUDA_REQUIRES, {"nvidia-cublas-cu12", "nvidia-cudnn-cu12", "filelock"},
                                 gpu=False)
    assert "CUDA build (2 nvidia-* packages)" in warning
    assert "pip install torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu" in warning
    assert "CUDA build" in cuda_build_warning("2.13.0+cu126", [], set(), gpu=False)


def test_no_warning_for_a_cpu_build_or_a_machine_with_a_gpu():
    assert cuda_build_warning("2.13.0+cpu", [], set(), gpu=False) is None
    assert cuda_build_warning("2.13.0", CUDA_REQUIRES, set(), gpu=False) is None  # nvidia-* not installed
    assert cuda_build_warning("2.13.0", CUDA_REQUIRES, {"nvidia-cublas-cu12"}, gpu=True) is None


def test_this_machine_has_the_cpu_build():
    assert torch_warning() is None
