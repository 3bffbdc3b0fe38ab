"""Small helpers shared by the command modules: common flags and their conversion to option objects.

Errors are not handled here: a command raises `HsiError` and `hsi.cli` prints it."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, TypeVar

Options = TypeVar("Options")


class OptionsMismatch(LookupError):
    """An option object built from flags that do not define all its fields (or from an override it
    has no field for): a programming error, so a traceback (exit 1), never a usage error."""


class DefaultsShown(argparse.HelpFormatter):
    """The formatter of every `hsi` parser: a flag's help ends with `(default: X)` when the flag has a
    value X when not given. A flag without one (None, an empty list or text, an off switch) says in
    its own help, in words, what happens when it is not given; a help that places `%(default)s`
    itself is left as it is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.nargs == 0 or "%(default)" in text or not has_default(action):
            return action.help
        return f"{text} (default: %(default)s)"


def has_default(action: argparse.Action) -> bool:
    """Whether `action` has a value worth showing when its flag is not given."""
    default = action.default
    if default is None or default is argparse.SUPPRESS or default == argparse.SUPPRESS:
        return False
    return not (isinstance(default, (str, list, tuple)) and len(default) == 0)


def options_from(values: Any, cls: type[Options], /, **overrides: Any) -> Options:
    """The dataclass `cls` with each field taken from `overrides`, else from the attribute of the same
    name of `values` (a parsed command line, or another settings object).

    A field that neither gives is refused by name, so a renamed flag cannot fall back to a default
    unnoticed: a field the command leaves at its default is passed as an override."""
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise OptionsMismatch(f"{cls.__name__} has no field {', '.join(unknown)}; its fields are {', '.join(names)}")
    missing = [name for name in names if name not in overrides and not hasattr(values, name)]
    if missing:
        raise OptionsMismatch(
            f"{cls.__name__}: no flag and no override gives {', '.join(missing)}; "
            "add the flag or pass the value to options_from"
        )
    return cls(**{name: overrides[name] if name in overrides else getattr(values, name) for name in names})


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seed_int(text: str) -> int:
    """A seed numpy, torch and random all take: a whole number in 0 .. 2**63 - 1."""
    value = int(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 2**63 - 1, got {value}")
    return value


def add_imagenet_flags(
    parser,
    *,
    source_help: str,
    split_default: str | None,
    split_help: str,
    boxes_help: str,
    boxes_flag: str = "--boxes",
    required: bool = False,
    source_type=Path,
) -> None:
    """An ImageNet root (`--source`), its split, and its box annotations when they are not found
    under the root: the three flags every command reading source images takes."""
    parser.add_argument("--source", type=source_type, required=required, help=source_help)
    parser.add_argument("--split", default=split_default, help=split_help)
    parser.add_argument(boxes_flag, type=Path, help=boxes_help)


def add_run_flags(parser: argparse.ArgumentParser, shard_size: int | str) -> None:
    """The flags of a stage run. `shard_size` is the --shard-size default: a number, or words saying
    where the size comes from when the flag is not given (a stage whose settings file or spec holds it)."""
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="shards built in parallel processes; the output is the same for any value",
    )
    parser.add_argument(
        "--shard-size",
        type=positive_int,
        default=shard_size if isinstance(shard_size, int) else None,
        help="samples per shard" if isinstance(shard_size, int) else f"samples per shard (default: {shard_size})",
    )
    parser.add_argument("--overwrite", action="store_true", help="delete and rebuild an existing output")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--runner",
        choices=["local", "ray", "slurm"],
        default="local",
        help="local processes, a Ray cluster, or one Slurm job array (docs/backends.md, clusters)",
    )
    parser.add_argument("--ray-address", help="address of a running Ray cluster (default: start a local one)")
    add_slurm_flags(parser)


def add_slurm_flags(parser: argparse.ArgumentParser, detach: bool = True) -> None:
    """The flags of `--runner slurm` (builder.core.slurm_runner.SlurmOptions); `detach`: the
    command writes shards, so it can submit and return."""
    from builder.core.slurm_runner import DEFAULT_TIME_MINUTES

    group = parser.add_argument_group("--runner slurm")
    group.add_argument("--slurm-partition", help="the partition the job array runs in (default: the cluster's)")
    group.add_argument("--slurm-gpus-per-task", type=positive_int, help="GPUs each array task asks for (default: none)")
    group.add_argument(
        "--slurm-array-parallelism", type=positive_int, help="array tasks running at once (default: no cap)"
    )
    group.add_argument(
        "--slurm-time",
        type=positive_int,
        default=DEFAULT_TIME_MINUTES,
        metavar="MINUTES",
        help="time limit of each array task",
    )
    group.add_argument(
        "--slurm-config",
        type=Path,
        metavar="YAML",
        help="further submitit SlurmExecutor parameters (mem, cpus_per_task, account, qos, setup, ...)",
    )
    if detach:
        group.add_argument(
            "--detach", action="store_true", help="submit the array and return; the same command run again collects it"
        )


def slurm_options(args: argparse.Namespace):
    """The `SlurmOptions` of a command's --slurm-* flags (and --detach where it has one)."""
    from builder.core.slurm_runner import SlurmOptions

    return SlurmOptions(
        partition=args.slurm_partition,
        gpus_per_task=args.slurm_gpus_per_task or 0,
        array_parallelism=args.slurm_array_parallelism,
        time_minutes=args.slurm_time,
        config=args.slurm_config,
        detach=getattr(args, "detach", False),
    )


def out_location(text: str) -> Path | str:
    """An --out (or extract's --source) value: a local folder, or an object store URL (s3://, gs://,
    file://) kept as text."""
    from builder.core.object_store import is_object_url

    return text.rstrip("/") if is_object_url(text) else Path(text)


def readable_folder(location: Path | str | None) -> Path | None:
    """A folder a command reads: a local one as it is, a store URL's objects copied into its staging folder."""
    from builder.core.object_store import fetch_folder, is_object_url

    return fetch_folder(str(location)) if location is not None and is_object_url(location) else location


def staged_out(args: argparse.Namespace) -> Path:
    """The local folder a stage command writes for its --out: the folder itself, or the staging
    folder of a store URL (args.store_mirror is then set, for run_options)."""
    from builder.core.object_store import stage_out

    local, args.store_mirror = stage_out(args.out)
    return local


def run_options(args: argparse.Namespace, gpus: tuple[int, ...] = ()):
    """The `RunOptions` of a stage command's flags."""
    from builder.core.stage import RunOptions

    slurm = slurm_options(args)
    mirror = getattr(args, "store_mirror", None)
    return options_from(args, RunOptions, gpus=gpus, progress=not args.no_progress, slurm=slurm, mirror=mirror)


def require_extra(command: str, extra: str, *modules: str) -> None:
    """Refuse, in one line, a command whose optional packages are not installed (the core install
    has no torch), instead of a traceback from deep inside."""
    import importlib

    from builder.core.errors import UsageError

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            raise UsageError(
                f"hsi {command} needs {name}, which is not installed; install the extra with: "
                f"pip install 'hard-spurious-imagenet[{extra}]'"
            ) from None


def add_trust_flags(parser) -> None:
    """--trust-file SHA256 (repeatable) and --trust-code: which TorchScript files may run their code."""
    from builder.backends.code_trust import TRUST_CODE_FLAG, TRUST_CODE_HELP, TRUST_FILE_FLAG, TRUST_FILE_HELP

    parser.add_argument(TRUST_FILE_FLAG, action="append", metavar="SHA256", help=TRUST_FILE_HELP)
    parser.add_argument(TRUST_CODE_FLAG, action="store_true", help=TRUST_CODE_HELP)


def resolve_parts(parts: str) -> Path:
    """The local parts folder a --parts argument names (compose and validate read it the same way): a
    parts folder as it is, a release folder's parts config (`data/parts`), or a published release's
    parts config, downloaded and checked, or a parts folder on an object store (s3://...), copied and
    checked."""
    from builder.compose.store_parts import fetch_store_parts
    from builder.core.object_store import is_object_url
    from cards.release import RELEASE_META, release_parts_dir
    from hf_scripts.release_parts import fetch_release_parts, is_hub_address

    if is_hub_address(parts):
        return fetch_release_parts(parts)
    if is_object_url(parts):
        return fetch_store_parts(parts)
    path = Path(parts)
    if (path / RELEASE_META).is_file():
        return release_parts_dir(path)
    return path
