"""`make gpu-kit`: the wheels a lent GPU machine needs to run this project, in `.gpu-kit/`.

The lent machines (docs/backends.md, "A lent GPU window") run Python 3.12 with their own torch
2.11, transformers and about 190 other packages, and reach no package index. This writes, for
cp312 on x86-64 Linux:

- the project's own wheel;
- every distribution the project needs (its core dependencies and the `models`, `augment`, `clip`
  and `eval` extras, followed through their own requirements) that the image does not hold, at the
  version installed here (the project's pins), downloaded with
  `pip download --only-binary=:all: --python-version 3.12 --platform manylinux... --no-deps`;
- `KIT.md` and `kit.json`: each wheel, its size, and why it is there (which requirement brought it).

A requirement the image already satisfies is not carried, nor followed: the image's own version
stays (install the kit with `pip install --no-index --no-deps .gpu-kit/*.whl`). The kit must stay
under 64 MiB, what one run can carry; it refuses to finish otherwise.

    python benchmarks/gpu_kit.py [--out .gpu-kit]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "hard-spurious-imagenet"
EXTRAS = ("models", "augment", "clip", "eval")
LIMIT_BYTES = 64 << 20
# The lent image ('cuda', for nvidia-h100-x1 and nvidia-h200), its Python packages as the device
# notes list them (read on a machine running it, 2026-11-17): Python 3.12.3, torch 2.11.0+cu130,
# transformers 5.17.0, timm, numpy, pillow, opencv-python-headless, pyarrow, pandas, scipy, pytest ...
IMAGE_PACKAGES = frozenset(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
    jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
    mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
    numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
    nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
    nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
    onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
    pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning
    pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
    tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers
    toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
    triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
    xxhash yarl zipp""".split()
)
# The machine's environment markers, for requirements that apply only on some Pythons or platforms.
TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements_of(name: str, extras: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """The distributions `name` (installed here) requires on the target, with `extras` asked."""
    try:
        distribution = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise SystemExit(
            f"gpu_kit: {name} is not installed in this Python: run it where every extra is (pip install -e "
            "'.[models,augment,clip,eval]'), e.g. make gpu-kit KIT_PYTHON=path/to/that/python"
        ) from None
    found = []
    for text in distribution.requires or []:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is not None and not any(marker.evaluate({**TARGET, "extra": e}) for e in (*extras, "")):
            continue
        found.append((canonical(requirement.name), tuple(sorted(requirement.extras))))
    return found


def needed() -> dict[str, str]:
    """{distribution: why} of everything the project needs that the image lacks."""
    why: dict[str, str] = {PROJECT: "the project itself"}
    asked: dict[str, set[str]] = {}
    todo = [(PROJECT, EXTRAS, "")]
    while todo:
        name, extras, parent = todo.pop()
        if name in IMAGE_PACKAGES:
            continue  # the image's own version serves, with its own requirements
        if name in asked and set(extras) <= asked[name]:
            continue
        asked.setdefault(name, set()).update(extras)
        why.setdefault(name, f"required by {parent}")
        for child, child_extras in requirements_of(name, tuple(extras)):
            todo.append((child, child_extras, name))
    return why


def download(name: str, version: str, out: Path) -> str:
    """The cp312 wheel of `name==version` into `out`; where the index has no wheel, one built here
    from the sdist, kept only when it is pure Python (then any interpreter takes it). Says which."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    fetched = subprocess.run(
        [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
            "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", *platforms,
            "--dest", str(out), f"{name}=={version}",
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if fetched.returncode == 0:
        return "downloaded"
    pip_wheel(f"{name}=={version}", out)
    wheel = wheel_of(name, out)
    if not wheel.name.endswith("-none-any.whl"):
        raise SystemExit(f"gpu_kit: {name}=={version} has no cp312 wheel and its sdist builds {wheel.name}, not pure")
    return "built from its sdist (pure Python; no wheel is published)"


def pip_wheel(what: str, out: Path, *options: str) -> None:
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *options, "--wheel-dir", str(out), what]
    subprocess.run(command, check=True)


def wheel_of(name: str, out: Path) -> Path:
    stem = canonical(name).replace("-", "_")
    matches = [p for p in out.glob("*.whl") if canonical(p.name.split("-")[0]).replace("-", "_") == stem]
    if len(matches) != 1:
        raise SystemExit(f"gpu_kit: expected one wheel of {name} in {out}, found {[p.name for p in matches]}")
    return matches[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".gpu-kit")
    args = parser.parse_args(argv)
    out = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rows = []
    for name, reason in sorted(needed().items()):
        version = metadata.version(name)
        if name == PROJECT:
            pip_wheel(str(ROOT), out, "--no-build-isolation")
            source = "built from this checkout"
        else:
            source = download(name, version, out)
        wheel = wheel_of(name, out)
        size = wheel.stat().st_size
        rows.append(
            {"name": name, "version": version, "wheel": wheel.name, "bytes": size, "why": reason, "source": source}
        )
    total = sum(row["bytes"] for row in rows)
    (out / "kit.json").write_text(json.dumps({"bytes": total, "wheels": rows}, indent=2, sort_keys=True) + "\n")
    lines = [
        "# The GPU kit",
        "",
        "Wheels for a lent GPU machine (Python 3.12, its own torch 2.11): what the project needs and the image lacks.",
        "Install there with `python3 -m pip install --no-index --no-deps .gpu-kit/*.whl`.",
        "",
        "| wheel | KiB | why | source |",
        "|---|---|---|---|",
        *(f"| {r['wheel']} | {r['bytes'] // 1024} | {r['why']} | {r['source']} |" for r in rows),
        "",
        f"{len(rows)} wheels, {total / 2**20:.1f} MiB (at most 64 MiB can be carried).",
    ]
    (out / "KIT.md").write_text("\n".join(lines) + "\n")
    print(f"gpu_kit: {len(rows)} wheels, {total / 2**20:.1f} MiB in {out}")
    if total > LIMIT_BYTES:
        print(f"gpu_kit: {total / 2**20:.1f} MiB is over the 64 MiB a run can carry", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
