"""Device names the tests expect with or without a GPU visible (``make test-gpu`` shows one
fake GPU to this process and to every worker process it starts)."""
from asyncflow.exec.devices import cuda_device_count


def placed_kind():
    """The kind default placement gives a numeric op: GPU when one is visible, as in TF1."""
    return "GPU" if cuda_device_count() else "CPU"


def task_devices(task, cpus=1):
    """``task``'s device names (``/job:worker/replica:0/task:0``): its CPUs, then GPU:0 when
    a GPU is visible."""
    names = [f"{task}/device:CPU:{i}" for i in range(cpus)]
    return names + ([f"{task}/device:GPU:0"] if cuda_device_count() else [])
