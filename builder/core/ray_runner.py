"""The Ray runner (`hsi extract|compose --runner ray [--ray-address ADDR]`): the local runner's contract on a
Ray cluster. Needs the optional extra: pip install 'hard-spurious-imagenet[ray]'.

Ray Data reads the planned shards (one row per unfinished shard) and maps them through a pool of
actors; each actor holds the stage's picklable shard builder (extract's loads its models once per
process) and builds whole shards, so the bytes are exactly the local runner's.
With GPUs there is one actor per GPU, and Ray pins each actor to its own device
(CUDA_VISIBLE_DEVICES), so `--device auto` or `cuda` means "this actor's GPU".

Finished shards are skipped and recorded in the same `_state` records as the local runner's, so a
run can be resumed by either runner; Ctrl-C ends the run (and a Ray started here) with the local
runner's `Interrupted`. On a multi-node cluster the output folder must be on storage
every node can write (a shared file system); actors write the shards where the driver reads them.
Before any shard is built, a probe file beside the output folder is looked for on every other node
(`check_output_shared`): a node that cannot see it refuses the run in one line.

`map_on_ray` is the same pool for work that writes no shards (validation's detector over chunks of
images): results come back to the driver, in task order.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

from builder.core.errors import HsiError, UsageError
from builder.core.runner import STATE_DIR, Interrupted, ShardPlan, ShardResult, load_finished, record_finished


class RayUnavailable(UsageError):
    """Ray is not installed or the cluster cannot be reached."""


def _import_ray():
    try:
        import ray
        import ray.data  # noqa: F401 - the Data library is part of the [ray] extra
    except ImportError as exc:
        raise RayUnavailable(
            f"--runner ray needs Ray Data ({exc.name} is missing); install it with: "
            "pip install 'hard-spurious-imagenet[ray]'"
        ) from None
    return ray


def check_ray_available() -> None:
    """Refuse `--runner ray` before anything is written when Ray Data is not installed."""
    _import_ray()


class ShardActor:
    """A Ray Data map worker: builds the shards whose positions it is given."""

    def __init__(
        self,
        plans: Sequence[ShardPlan],
        build: Callable[[ShardPlan], ShardResult],
        out_dir: str,
        store_url: str | None = None,
    ) -> None:
        self.plans = plans
        self.build = build
        self.out_dir = Path(out_dir)
        self.store_url = store_url  # an object store output: each finished shard goes there, not to a shared disk

    def __call__(self, batch: dict) -> dict:
        positions, results = [], []
        for position in batch["position"]:
            plan = self.plans[int(position)]
            self.out_dir.mkdir(parents=True, exist_ok=True)  # on a node of its own, a local temporary folder
            result = self.build(plan)
            record_finished(self.out_dir, plan, result)
            if self.store_url is not None:
                from builder.core.object_store import send_shard

                send_shard(self.store_url, self.out_dir, plan.filename, f"{STATE_DIR}/{plan.filename}.json")
            positions.append(int(position))
            results.append(json.dumps(result.to_json(), sort_keys=True))
        return {"position": positions, "result": results}


def actor_count(ray, todo: int, num_gpus: int, workers: int | None) -> int:
    if num_gpus > 0:
        return max(1, min(num_gpus, todo))
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, min(workers or cpus, cpus, todo))


def run_shards_ray(
    plans: Sequence[ShardPlan],
    build: Callable[[ShardPlan], ShardResult],
    out_dir: Path,
    *,
    address: str | None = None,
    num_gpus: int = 0,
    workers: int | None = None,
    progress: bool = True,
    store_url: str | None = None,
) -> tuple[list[ShardResult], int]:
    """Build every unfinished shard on Ray; return all results in plan order and how many were reused.

    With `store_url` (an object store folder standing for `out_dir`) the actors send each finished
    shard and its record there and keep nothing; the driver then fetches them into `out_dir` from
    the store, so the nodes share no disk for the output.

    `address` is a cluster address (None: the running Ray of this process, else a new local one);
    `num_gpus` > 0 starts one actor per GPU, each holding one; otherwise `workers` CPU actors (at
    most the cluster's CPUs). Ray started here is shut down at the end; one started by the caller
    is left running.
    """
    out_dir = Path(out_dir)
    results: dict[int, ShardResult] = {}
    todo: list[int] = []
    for position, plan in enumerate(plans):
        finished = load_finished(out_dir, plan)
        if finished is None:
            todo.append(position)
        else:
            results[position] = finished
    reused = len(results)
    if todo:
        try:
            with ray_session(address, progress) as ray:
                if store_url is None:
                    check_output_shared(ray, out_dir)
                results.update(_run_on_ray(ray, plans, todo, build, out_dir, num_gpus, workers, progress, store_url))
            if store_url is not None:
                from builder.core.object_store import StoreFolder, pull_folder

                pull_folder(StoreFolder(store_url), out_dir)  # the driver reads the shards from the store only
        except KeyboardInterrupt:
            # as the local runner says it: finished shards (their state records) are kept for the resume
            built = sum(load_finished(out_dir, plans[position]) is not None for position in todo)
            raise Interrupted(built, len(todo), reused) from None
    return [results[position] for position in range(len(plans))], reused


@contextmanager
def ray_session(address: str | None, log_to_driver: bool):
    """The `ray` module, connected: to the Ray this process already runs, else to `address` (None:
    a new local instance). A Ray started here is shut down on leaving, also on Ctrl-C."""
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=log_to_driver)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayUnavailable(f"cannot start or reach Ray at {address or 'a new local instance'}: {exc}") from None
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


class OutputNotShared(UsageError):
    """Ray nodes other than this one cannot see the output folder (no shared file system)."""


def _probe_sees(path: str, token: str) -> bool:
    """Run on one node: whether the driver's probe file is there, with the driver's token."""
    probe = Path(path)
    try:
        return probe.is_file() and not probe.is_symlink() and probe.read_text("utf-8") == token
    except OSError:
        return False


def other_nodes(ray) -> dict[str, str]:
    """{node id: address} of the cluster's alive nodes other than the driver's."""
    here = ray.get_runtime_context().get_node_id()
    return {
        node["NodeID"]: str(node.get("NodeManagerAddress", "?"))
        for node in ray.nodes()
        if node.get("Alive") and node["NodeID"] != here
    }


def nodes_seeing(ray, path: Path, token: str, nodes: Sequence[str]) -> dict[str, bool]:
    """{node id: whether a task pinned to that node reads `token` from `path`}."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(_probe_sees)
    pending = {
        node: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)).remote(
            str(path), token
        )
        for node in nodes
    }
    return {node: bool(ray.get(ref, timeout=120)) for node, ref in pending.items()}


def check_output_shared(ray, out_dir: Path) -> None:
    """Refuse, before any shard is built, an output folder that some other node of the cluster does
    not see: its actors would write their shards to their own disks. A probe file beside the folder
    (where its lock file is) is looked for by one task on each other node."""
    nodes = other_nodes(ray)
    if not nodes:
        return
    out_dir = Path(out_dir).resolve()
    token = f"{os.getpid()}-{os.urandom(8).hex()}"
    probe = out_dir.parent / f".{out_dir.name}.probe-{token}"
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.write_text(token, "utf-8")
    try:
        seen = nodes_seeing(ray, probe, token, list(nodes))
    finally:
        probe.unlink(missing_ok=True)
    blind = [nodes[node] for node, sees in seen.items() if not sees]
    if blind:
        raise OutputNotShared(
            f"{out_dir} is not on a file system the Ray nodes share: {len(blind)} of the {len(nodes)} other nodes "
            f"({', '.join(sorted(blind)[:3])}) cannot see it; put the output (and for an s3:// --out, HSI_STAGING) "
            "on a file system every node mounts at the same path, or run on one node"
        )


def _run_on_ray(
    ray, plans, todo, build, out_dir: Path, num_gpus: int, workers: int | None, progress: bool, store_url=None
) -> dict[int, ShardResult]:
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = progress
    dataset = ray.data.from_items([{"position": position} for position in todo], override_num_blocks=len(todo))
    mapped = dataset.map_batches(
        ShardActor,
        batch_size=1,  # the shard is the unit of work; one row = one whole shard
        compute=ray.data.ActorPoolStrategy(size=actor_count(ray, len(todo), num_gpus, workers)),
        fn_constructor_kwargs={"plans": list(plans), "build": build, "out_dir": str(out_dir), "store_url": store_url},
        num_gpus=1 if num_gpus > 0 else 0,
        num_cpus=1,
        batch_format="default",
    )
    built = {}
    for row in mapped.iter_rows():
        built[int(row["position"])] = ShardResult.from_json(json.loads(row["result"]))
    missing = sorted(set(todo) - set(built))
    if missing:
        raise RuntimeError(f"Ray returned no result for shards {[plans[p].filename for p in missing]}")
    return built


class TaskActor:
    """A Ray Data map worker for `map_on_ray`: holds the function (which loads its models once per
    actor) and runs it on the tasks whose positions it is given. A refusal (an `HsiError`, e.g. a
    device this node lacks) travels back as a value, so the driver raises it as one line."""

    def __init__(self, tasks: Sequence, function: Callable) -> None:
        self.tasks = tasks
        self.function = function

    def __call__(self, batch: dict) -> dict:
        positions, results = [], []
        for position in batch["position"]:
            try:
                outcome = ("done", self.function(self.tasks[int(position)]))
            except HsiError as exc:
                outcome = ("refused", exc)
            positions.append(int(position))
            results.append(pickle.dumps(outcome))
        return {"position": positions, "result": results}


def map_on_ray(
    function: Callable,
    tasks: Sequence,
    *,
    address: str | None = None,
    workers: int = 1,
    gpus: bool | None = None,
    progress: bool = True,
) -> list:
    """`function(task)` for every task on Ray actors, results in task order: `runner.map_in_processes`
    on a cluster. Up to `workers` actors, each holding one GPU when `gpus` (None: when the cluster
    has any), else one CPU; never more than the cluster has, nor than there are tasks. `progress`
    shows Ray's progress bars and the workers' output."""
    if not tasks:
        return []
    with ray_session(address, progress) as ray:
        ray.data.DataContext.get_current().enable_progress_bars = progress
        resources = ray.cluster_resources()
        cluster_gpus = int(resources.get("GPU", 0))
        use_gpus = cluster_gpus > 0 if gpus is None else gpus
        if use_gpus and cluster_gpus == 0:
            raise RayUnavailable("the Ray cluster has no GPU; pass --device cpu (or auto) to run on its CPUs")
        available = cluster_gpus if use_gpus else int(resources.get("CPU", 1))
        dataset = ray.data.from_items([{"position": p} for p in range(len(tasks))], override_num_blocks=len(tasks))
        mapped = dataset.map_batches(
            TaskActor,
            batch_size=1,  # one row = one task (a chunk of work in itself)
            compute=ray.data.ActorPoolStrategy(size=max(1, min(workers, available, len(tasks)))),
            fn_constructor_kwargs={"tasks": list(tasks), "function": function},
            num_gpus=1 if use_gpus else 0,
            num_cpus=1,
            batch_format="default",
        )
        outcomes = {int(row["position"]): pickle.loads(row["result"]) for row in mapped.iter_rows()}
    missing = sorted(set(range(len(tasks))) - set(outcomes))
    if missing:
        raise RuntimeError(f"Ray returned no result for tasks {missing}")
    for kind, value in (outcomes[p] for p in range(len(tasks))):
        if kind == "refused":
            raise value
    return [outcomes[p][1] for p in range(len(tasks))]
