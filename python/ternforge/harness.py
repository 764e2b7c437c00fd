"""`python -m ternforge harness`: EleutherAI's lm-evaluation-harness on the graded benchmarks, against a served model.

The eval stage (lib/eval/harness.ts) serves the submission, puts its request recorder in front of it, and calls
this with the recorder's chat-completions URL and the benchmarks' data files. Here each benchmark becomes an
lm-eval task: lm-eval 0.4.13's own task where it has one (BENCHMARKS, `builtin`), included from its installed
task directory so its prompt, filters and scorers are the ones it ships, with only the data source replaced by
the given local files (`dataset_path: json|parquet`, `data_files`); LiveCodeBench, which it lacks, is our task
in its format (harness_tasks/). Then `lm_eval run` itself runs, as a user would: the `local-chat-completions`
client, `num_concurrent` requests in flight, the chat template applied by the server, zero-shot (the grader
asks one question per request), greedy, `max_gen_toks` the grader's limit, every sample logged. Its output
files are the result; this reports where they are and which task, version, filter and metric each benchmark
is read by. The stage reads the samples back, joins each to the recorder's record of its request (wall time,
finish reason, tokens) and scores as the grader does.

Nothing is downloaded: HF_HUB_OFFLINE / HF_DATASETS_OFFLINE are set for lm-eval, and its datasets cache lives
in `work`, which the stage deletes.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .events import emit, log

OWN_TASKS = Path(__file__).parent / "harness_tasks"

# benchmark -> how lm-eval evaluates it. `builtin`: a task file under lm_eval/tasks (with `{category}` one file
# per MMLU-Pro category present in the data, gathered in a group as lm-eval's own `mmlu_pro` group does);
# `own`: a file under harness_tasks/. `filter` and `metric` name the per-sample value that is the answer's score
# (lm-eval's samples carry one line per filter).
BENCHMARKS: dict[str, dict[str, Any]] = {
    "gpqa-diamond": {"builtin": "gpqa/cot_zeroshot/gpqa_diamond_cot_zeroshot.yaml", "reference": "gpqa_diamond_cot_zeroshot", "filter": "flexible-extract", "metric": "exact_match"},
    "math-500": {"builtin": "minerva_math/minerva_math500.yaml", "reference": "minerva_math500", "filter": "none", "metric": "math_verify"},
    "livecodebench": {"own": "ternforge_livecodebench.yaml", "reference": None, "filter": "none", "metric": "nonempty"},
    "mmlu-pro": {"builtin": "mmlu_pro/mmlu_pro_{category}.yaml", "reference": "mmlu_pro", "filter": "custom-extract", "metric": "exact_match"},
}
# lm-eval's MMLU-Pro category tasks, by the dataset's `category` value.
MMLU_PRO_CATEGORIES = ["biology", "business", "chemistry", "computer science", "economics", "engineering", "health", "history", "law", "math", "other", "philosophy", "physics", "psychology"]
FORMATS = ("json", "parquet", "csv")


class HarnessInputError(ValueError):
    """A benchmark or data file the harness cannot evaluate."""


def task_name(benchmark: str) -> str:
    return "ternforge_" + benchmark.replace("-", "_")


def _yaml(obj: dict[str, Any]) -> str:
    # JSON is YAML: lm-eval's loader reads it, and nothing here needs YAML's own syntax.
    return json.dumps(obj, indent=2) + "\n"


def _categories(fmt: str, files: dict[str, list[str]]) -> list[str]:
    """The MMLU-Pro categories present in the files, read directly (no `datasets` cache outside `work`)."""
    found: set[str] = set()
    for paths in files.values():
        for p in paths:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                found.update(pq.read_table(p, columns=["category"]).column("category").to_pylist())
            elif fmt == "json":
                with open(p, encoding="utf-8") as f:
                    found.update(json.loads(line)["category"] for line in f if line.strip())
            else:
                raise HarnessInputError(f"mmlu-pro data in {fmt}: give it as json lines or parquet")
    unknown = sorted(found - set(MMLU_PRO_CATEGORIES))
    if unknown:
        raise HarnessInputError(f"mmlu-pro data has categories lm-eval has no task for: {unknown}")
    return [c for c in MMLU_PRO_CATEGORIES if c in found]


def _source_overrides(source: Path, files: dict[str, list[str]], fmt: str) -> dict[str, Any]:
    """The data source replaced by `files`; a few-shot split the files lack is dropped (the run is zero-shot:
    lm-eval would still load it, and MMLU-Pro's project-written stand-in has no validation split)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    over: dict[str, Any] = {"dataset_path": fmt, "dataset_name": None, "dataset_kwargs": {"data_files": files}}
    split = load_yaml(source, resolve_func=False).get("fewshot_split")
    if split is not None and split not in files:
        over["fewshot_split"] = None
    return over


def write_tasks(benchmarks: list[dict[str, Any]], tasks_dir: Path) -> list[dict[str, Any]]:
    """One task file (or a group of them) per benchmark in `tasks_dir`; returns what reads each back."""
    import lm_eval.tasks

    builtin_root = Path(lm_eval.tasks.__file__).parent
    tasks_dir.mkdir(parents=True, exist_ok=True)
    plan = []
    for b in benchmarks:
        name, fmt, files = b["benchmark"], b["format"], b["files"]
        if name not in BENCHMARKS:
            raise HarnessInputError(f"no lm-eval task for benchmark {name!r}; known: {sorted(BENCHMARKS)}")
        if fmt not in FORMATS:
            raise HarnessInputError(f"{name}: data format {fmt!r} is not one of {FORMATS}")
        for paths in files.values():
            for p in paths:
                if not Path(p).is_file():
                    raise HarnessInputError(f"{name}: data file {p} does not exist")
        spec = BENCHMARKS[name]
        top = task_name(name)
        if "own" in spec:
            leaves = [top]
            source = OWN_TASKS / spec["own"]
            (tasks_dir / f"{top}.yaml").write_text(_yaml({"include": str(source), "task": top, **_source_overrides(source, files, fmt)}))
        elif "{category}" in spec["builtin"]:
            leaves = []
            for c in _categories(fmt, files):
                leaf = f"{top}_{c.replace(' ', '_')}"
                source = builtin_root / spec["builtin"].format(category=c.replace(" ", "_"))
                (tasks_dir / f"{leaf}.yaml").write_text(_yaml({"include": str(source), "task": leaf, **_source_overrides(source, files, fmt)}))
                leaves.append(leaf)
            group = {"group": top, "task": leaves, "aggregate_metric_list": [{"aggregation": "mean", "metric": spec["metric"], "weight_by_size": True, "filter_list": spec["filter"]}], "metadata": {"version": 1.0}}
            (tasks_dir / f"{top}.yaml").write_text(_yaml(group))
        else:
            leaves = [top]
            source = builtin_root / spec["builtin"]
            (tasks_dir / f"{top}.yaml").write_text(_yaml({"include": str(source), "task": top, **_source_overrides(source, files, fmt)}))
        plan.append({"benchmark": name, "task": top, "tasks": leaves, "reference_task": spec["reference"], "filter": spec["filter"], "metric": spec["metric"]})
    return plan


def lm_eval_argv(config: dict[str, Any], tasks: list[str], tasks_dir: Path, out: Path) -> list[str]:
    model_args = ",".join([
        f"base_url={config['base_url']}",
        f"model={config.get('model', 'ternforge')}",
        f"num_concurrent={int(config.get('concurrency', 16))}",
        # the recorder answers every request (an error or a deadline as an empty reply it counts apart), so a
        # retry would only send the grader's request twice
        "max_retries=1",
        f"timeout={int(config['client_timeout_s'])}",
        "tokenized_requests=False",
        "tokenizer_backend=None",
    ])
    gen = f"max_gen_toks={int(config['max_tokens'])},temperature=0,do_sample=False"
    argv = [sys.executable, "-m", "lm_eval", "run", "--model", "local-chat-completions", "--model_args", model_args,
            "--tasks", ",".join(tasks), "--include_path", str(tasks_dir), "--apply_chat_template", "--num_fewshot", "0",
            "--gen_kwargs", gen, "--output_path", str(out), "--log_samples", "--seed", str(int(config.get("seed", 1234)))]
    if config.get("limit") is not None:
        argv += ["--limit", str(int(config["limit"]))]
    return argv


def main(config: dict[str, Any]) -> dict[str, Any]:
    work = Path(config["work"])
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    plan = write_tasks(config["benchmarks"], work / "tasks")
    argv = lm_eval_argv(config, [p["task"] for p in plan], work / "tasks", out)
    # No progress bars (tqdm's and datasets' write one log line per update): the stage logs its own progress
    # from the requests it records (lib/eval/harness.ts, progressLine).
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(work / "hf"), "HF_DATASETS_CACHE": str(work / "hf" / "datasets"), "TOKENIZERS_PARALLELISM": "false",
           "TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    log("harness: " + " ".join(argv))
    # lm-eval's own stdout (its table) goes to our log: stdout is the events channel
    r = subprocess.run(argv, env=env, stdout=sys.stderr, stderr=sys.stderr, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"lm_eval exited with status {r.returncode} (its log is above)")
    results = sorted(glob.glob(str(out / "**" / "results_*.json"), recursive=True))
    if len(results) != 1:
        raise RuntimeError(f"expected one lm-eval results file under {out}, found {len(results)}")
    for p in plan:
        p["samples"] = {}
        for leaf in p["tasks"]:
            found = sorted(glob.glob(str(out / "**" / f"samples_{leaf}_*.jsonl"), recursive=True))
            if len(found) != 1:
                raise RuntimeError(f"expected one samples file for task {leaf} under {out}, found {len(found)}")
            p["samples"][leaf] = found[0]
    return {
        "lm_eval": version("lm-eval"),
        "math_verify": version("math-verify"),
        "argv": argv[1:],
        "results": results[0],
        "benchmarks": plan,
    }
