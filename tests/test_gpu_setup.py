"""A GPU machine, without a GPU: `make install CUDA=NNN` (checked as a dry run), `device=auto`
and the refusal of a GPU MXNet 1.9.1 has no kernels for, with the GPUs MXNet sees and the
driver's answers faked. Nothing here needs, or finds, a real GPU: every test runs the same on a
machine with one."""
import logging
import os
import subprocess
import sys

import mxnet as mx
import pytest

from mtx.errors import USER_ERROR, ConfigError
from mtx.hardware import devices, gpu
from tests.conftest import ROOT, run_script
from tests.test_cli import assert_one_line


# -- the faked machine -----------------------------------------------------------------------

class FakeDriver:
    """The CUDA driver calls `gpu.cuda_device` makes (libcuda), for ``count`` GPUs of one kind:
    each writes its answer through the pointer it is given and returns CUDA_SUCCESS (0)."""

    def __init__(self, count, name, capability):
        self.count, self.name, self.capability = count, name, capability

    def cuInit(self, flags):  # noqa: N802 (the driver's own names)
        return 0

    def cuDeviceGet(self, device, index):  # noqa: N802
        if index >= self.count:
            return 101  # CUDA_ERROR_INVALID_DEVICE
        device._obj.value = index
        return 0

    def cuDeviceGetAttribute(self, value, attribute, device):  # noqa: N802
        value._obj.value = {75: self.capability // 10, 76: self.capability % 10}[attribute]
        return 0

    def cuDeviceGetName(self, buffer, length, device):  # noqa: N802
        buffer.value = self.name.encode()[:length - 1]
        return 0


def fake_machine(monkeypatch, count=0, capability=80, name="NVIDIA A100-SXM4-40GB",
                 has_cuda=True, driver=True):
    """MXNet sees ``count`` GPUs (a CUDA build when ``has_cuda``), each ``name`` of
    ``capability`` (major * 10 + minor) to the driver; no driver library without ``driver``."""
    monkeypatch.setattr(mx.context, "num_gpus", lambda: count)
    monkeypatch.setattr(gpu, "mxnet_has_cuda", lambda: has_cuda)
    monkeypatch.setattr(gpu, "_libcuda",
                        lambda: FakeDriver(count, name, capability) if driver else None)


def auto_line(caplog):
    """The one line `resolve_device("auto")` logged."""
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("device=auto")]
    assert len(lines) == 1, lines
    return lines[0]


# -- device=auto -----------------------------------------------------------------------------

def test_auto_takes_the_gpu_mxnet_sees_and_says_which(monkeypatch, caplog):
    fake_machine(monkeypatch, count=2, capability=80)
    caplog.set_level(logging.INFO, logger="mtx.hardware.devices")
    assert devices.resolve_device("auto") == mx.gpu(0)
    assert auto_line(caplog) == "device=auto: gpu:0 (NVIDIA A100-SXM4-40GB, compute capability 8.0)"


@pytest.mark.parametrize("has_cuda, reason", [(False, "this MXNet has no CUDA"),
                                              (True, "no GPU visible")])
def test_auto_takes_the_cpu_when_mxnet_sees_no_gpu_and_says_why(monkeypatch, caplog, has_cuda,
                                                                  reason):
    fake_machine(monkeypatch, count=0, has_cuda=has_cuda)
    caplog.set_level(logging.INFO, logger="mtx.hardware.devices")
    assert devices.resolve_device("auto") == mx.cpu(0) == devices.resolve_device("cpu")
    assert auto_line(caplog) == f"device=auto: cpu ({reason})"


def test_auto_falls_back_to_the_cpu_on_a_gpu_without_kernels(monkeypatch, caplog):
    """A Hopper GPU: auto trains on the CPU, and the log says why (device=gpu would stop)."""
    fake_machine(monkeypatch, count=1, capability=90, name="NVIDIA H100 80GB HBM3")
    caplog.set_level(logging.INFO, logger="mtx.hardware.devices")
    assert devices.resolve_device("auto") == mx.cpu(0)
    line = auto_line(caplog)
    assert line.startswith("device=auto: cpu (gpu:0 (NVIDIA H100 80GB HBM3, compute capability "
                           "9.0): MXNet 1.9.1's CUDA builds have no kernels for it")
    assert "9.0 is beyond them" in line


def test_auto_tries_a_gpu_whose_capability_the_driver_cannot_tell(monkeypatch, caplog):
    """MXNet sees the GPU, so it is used, and the log says the capability is unknown."""
    fake_machine(monkeypatch, count=1, driver=False)
    caplog.set_level(logging.INFO, logger="mtx.hardware.devices")
    assert devices.resolve_device("auto") == mx.gpu(0)
    assert auto_line(caplog) == "device=auto: gpu:0 (name unknown, compute capability unknown)"


def test_a_cuda_error_while_counting_gpus_is_a_reason_not_a_traceback(monkeypatch, caplog):
    def num_gpus():
        raise mx.base.MXNetError("Traceback (most recent call last):\n  File \"x.cc\", line 1\n"
                                 "CUDA: CUDA driver version is insufficient for CUDA runtime "
                                 "version\n")
    monkeypatch.setattr(mx.context, "num_gpus", num_gpus)
    caplog.set_level(logging.INFO, logger="mtx.hardware.devices")
    assert devices.resolve_device("auto") == mx.cpu(0)
    assert auto_line(caplog) == ("device=auto: cpu (CUDA failed: CUDA: CUDA driver version is "
                                 "insufficient for CUDA runtime version)")


def test_precision_auto_follows_the_device_auto_chose(monkeypatch):
    """On the CPU `train.precision=auto` probes the CPU as before; on a GPU it keeps float32."""
    from mtx.training import precision
    monkeypatch.setattr(precision, "probe_choice",
                        lambda: {"used": "float32", "reason": "probed this CPU"})
    fake_machine(monkeypatch, count=0)
    on_cpu = precision.choose_precision("auto", [devices.resolve_device("auto")])
    assert on_cpu["reason"] == "probed this CPU"
    fake_machine(monkeypatch, count=1, capability=86)
    on_gpu = precision.choose_precision("auto", [devices.resolve_device("auto")])
    assert on_gpu["used"] == "float32" and on_gpu["reason"].startswith("auto on a GPU")


# -- which compute capabilities MXNet 1.9.1 has kernels for ----------------------------------

@pytest.mark.parametrize("capability", [50, 52, 61, 70, 75, 80, 86, 89])
def test_maxwell_to_ampere_and_ada_have_kernels(capability):
    assert gpu.kernels_missing(capability) is None


@pytest.mark.parametrize("capability, side", [(35, "below"), (37, "below"), (87, "beyond"),
                                              (90, "beyond"), (100, "beyond"), (120, "beyond")])
def test_kepler_hopper_and_later_have_none(capability, side):
    assert f"{capability // 10}.{capability % 10} is {side} them" in gpu.kernels_missing(capability)


# -- device=gpu: refused in one line with what works instead ---------------------------------

@pytest.mark.parametrize("capability, name", [(90, "NVIDIA H100 80GB HBM3"), (37, "Tesla K80")])
def test_gpu_without_kernels_is_one_config_error_naming_what_works(monkeypatch, capability,
                                                                     name):
    fake_machine(monkeypatch, count=1, capability=capability, name=name)
    with pytest.raises(ConfigError) as error:
        devices.resolve_device("gpu")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"device=gpu is gpu:0 ({name}, compute capability "
                              f"{capability // 10}.{capability % 10}), and MXNet 1.9.1's CUDA "
                              f"builds have no kernels for it")
    assert "use device=cpu" in message and "mtx-export ckpt=<run> output=<dir>" in message


def test_gpu_with_kernels_is_taken(monkeypatch):
    fake_machine(monkeypatch, count=2, capability=89, name="NVIDIA L4")
    assert devices.resolve_device("gpu:1") == mx.gpu(1)


@pytest.mark.parametrize("count, has_cuda, fix", [
    (0, False, "use device=cpu or device=auto, or install MXNet's CUDA build: make install "
               "CUDA=117"),
    (0, True, "or make a GPU visible (nvidia-smi lists them"),
    (2, True, "use device=gpu:0 ... gpu:1, or device=auto")])
def test_a_gpu_mxnet_does_not_see_is_one_config_error_with_the_fix(monkeypatch, count, has_cuda,
                                                                   fix):
    fake_machine(monkeypatch, count=count, has_cuda=has_cuda)
    with pytest.raises(ConfigError) as error:
        devices.resolve_device("gpu:2")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"device=gpu:2 but MXNet sees {count} GPU(s)") and fix in message


@pytest.mark.slow
def test_mtx_train_device_gpu_without_a_gpu_is_one_line_exit_2(tmp_path):
    """The command line: on a machine whose MXNet sees no GPU (CUDA_VISIBLE_DEVICES hides any
    there is), one line with the fix, exit 2, before the run directory holds a checkpoint."""
    done = run_script("train", "device=gpu", "experiment=smoke", f"hydra.run.dir={tmp_path}/run",
                      env={"CUDA_VISIBLE_DEVICES": ""})
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert line.startswith("error: device=gpu but MXNet sees 0 GPU(s) (")
    assert "use device=cpu or device=auto" in line
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
def test_mtx_train_logs_what_device_auto_chose(tmp_path):
    """The default device is auto: a toy run on this machine logs the choice and its reason."""
    done = run_script("train", "experiment=smoke", "train.max_epochs=1",
                      "train.precision=float32", f"hydra.run.dir={tmp_path}/run",
                      env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    log = (tmp_path / "run" / "train.log").read_text()
    assert ("device=auto: cpu (this MXNet has no CUDA)" in log
            or "device=auto: cpu (no GPU visible)" in log), log[:3000]


# -- CTranslate2: auto is resolved before the compute type is chosen -------------------------

@pytest.mark.parametrize("count, device", [(0, ("cpu", 0)), (1, ("cuda", 0))])
def test_ctranslate2_auto_is_the_gpu_it_sees_or_the_cpu(monkeypatch, caplog, count, device):
    from mtx.deploy import backend

    class FakeCTranslate2:
        @staticmethod
        def get_cuda_device_count():
            return count
    monkeypatch.setattr(backend, "require", lambda: FakeCTranslate2)
    caplog.set_level(logging.INFO, logger="mtx")
    assert backend.ct2_device("auto") == device
    assert f"CTranslate2 sees {count} CUDA device(s)" in caplog.text


# -- make install CUDA=NNN (dry runs: nothing is downloaded) ----------------------------------

def make(*args, venv, dry_run=True):
    """`make -s [-n] <args> VENV=venv` with this Python: the CompletedProcess (text)."""
    return subprocess.run(["/usr/bin/make", "-s", "-C", str(ROOT), *(["-n"] if dry_run else []),
                           *args, f"VENV={venv}", f"PYTHON={sys.executable}"],
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"]},
                          timeout=60)


def installed_venv(tmp_path, build, stamp_time=4e9):
    """A venv dir that `make install` took for done, with ``build`` recorded and its stamp
    at ``stamp_time`` (the default: after pyproject.toml; 0: before it)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / ".mxnet-build").write_text(build + "\n")
    (venv / ".installed").touch()
    os.utime(venv / ".installed", (stamp_time, stamp_time))
    return venv


def pip_steps(stdout, venv):
    """The dry run's pip commands in order, without the venv's path."""
    return [line.replace(f"{venv}/bin/python -m ", "") for line in stdout.splitlines()
            if "-m pip " in line and not line.startswith("#")]


def project_step(steps):
    """The index of the step that installs mtx (its extras, the mkl one too on CPUs with AMX)."""
    return next(i for i, step in enumerate(steps)
                if step.startswith('pip install -q -e ".[test,serve,deploy'))


def test_cuda_switch_puts_the_cuda_wheel_in_place_of_the_cpu_one(tmp_path):
    venv = tmp_path / "venv"
    done = make("install", "CUDA=117", venv=venv)
    assert done.returncode == 0, done.stderr
    steps = pip_steps(done.stdout, venv)
    project = project_step(steps)
    # the CPU wheel mtx depends on goes after the project is installed, then the CUDA wheel comes
    # at the numpy the project pinned
    assert steps[project + 1] == "pip uninstall -qq -y mxnet"
    assert steps[project + 2] == (f'pip install -q "mxnet-cu117==1.9.1" "numpy==$({venv}/bin/python '
                                  f'-c \'import numpy; print(numpy.__version__)\')"')
    assert f"echo cu117 > {venv}/.mxnet-build" in done.stdout


def test_without_the_switch_a_new_venv_gets_the_cpu_wheel(tmp_path):
    venv = tmp_path / "venv"
    done = make("install", venv=venv)
    assert done.returncode == 0, done.stderr
    assert "mxnet-cu117==" not in done.stdout and "uninstall -qq -y mxnet\n" not in done.stdout
    assert f"echo cpu > {venv}/.mxnet-build" in done.stdout


def test_a_cuda_venv_keeps_its_build_when_the_switch_is_not_given(tmp_path):
    """`make train` after `make install CUDA=112` does not put the CPU wheel back; a change of
    pyproject.toml installs again with the same CUDA build."""
    venv = installed_venv(tmp_path, "cu112")
    up_to_date = make("install", venv=venv)
    assert up_to_date.returncode == 0 and "pip" not in up_to_date.stdout, up_to_date.stdout
    venv_changed = installed_venv(tmp_path / "older", "cu112", stamp_time=0)
    again = make("install", venv=venv_changed)
    assert '"mxnet-cu112==1.9.1"' in again.stdout
    assert f"echo cu112 > {venv_changed}/.mxnet-build" in again.stdout


@pytest.mark.parametrize("switch, build", [("CUDA=none", "cpu"), ("CUDA=116", "cu116")])
def test_another_build_asked_for_installs_again(tmp_path, switch, build):
    """A venv with mxnet-cu112 asked for another build: every CUDA wheel leaves first (they and
    the CPU wheel write the same files), then the project, then the build asked for."""
    venv = installed_venv(tmp_path, "cu112")
    done = make("install", switch, venv=venv)
    assert done.returncode == 0, done.stderr
    steps = pip_steps(done.stdout, venv)
    clean = [i for i, step in enumerate(steps) if step.startswith("if pip show mxnet-cu110 ")]
    assert clean and "uninstall -qq -y mxnet mxnet-cu110" in steps[clean[0]]
    assert clean[0] < project_step(steps)
    assert (f'"mxnet-{build}==1.9.1"' in done.stdout) == (build != "cpu")
    assert f"echo {build} > {venv}/.mxnet-build" in done.stdout


@pytest.mark.parametrize("value", ["118", "11.7", "cu117", "112 113", "yes"])
def test_a_cuda_value_that_is_no_build_is_one_line_before_anything(tmp_path, value):
    venv = tmp_path / "venv"
    done = make("install", f"CUDA={value}", venv=venv, dry_run=False)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert f"CUDA={value} is not an MXNet 1.9.1 CUDA build: use CUDA=110 ... CUDA=117" in lines[0]
    assert "CUDA=none for the CPU build" in lines[0]
    assert not venv.exists()


def test_make_help_documents_the_switch(tmp_path):
    done = make("help", venv=tmp_path / "venv", dry_run=False)
    install = [line for line in done.stdout.splitlines() if line.startswith("install\t")]
    assert install and "CUDA=110...117: MXNet's CUDA build instead of the CPU one" in install[0]
    assert "CUDA=none" in install[0]
