"""The test harness's fork server imports this first, so that the ranks it forks can use CUDA.

A process whose CUDA runtime was asked anything (``torch.cuda.is_available()`` asks it how
many devices there are) marks every child it forks afterwards as unable to use CUDA
("Cannot re-initialize CUDA in forked subprocess"). MMEngine asks at import
(``mmengine/device/utils.py``), and so does this package (``import_changes``). With
``PYTORCH_NVML_BASED_CUDA_CHECK=1``, torch answers those questions from NVML, the driver's
management library, and the CUDA runtime stays untouched in the fork server, so its ranks
start clean on a GPU machine. Where NVML is missing, torch falls back to the runtime; the
rank then says so (``tests.dist_utils``).

``tests/test_harness_cuda_safe.py`` holds this on a CPU machine: it starts the harness's
real fork server with the CUDA runtime's entry points replaced by recorders, and fails
naming the import that would have initialised CUDA.
"""
import os

os.environ['PYTORCH_NVML_BASED_CUDA_CHECK'] = '1'
