"""The harness worker's own inputs (python/ternforge/harness.py, harness_tasks/livecodebench.py): the task files
it writes over lm-eval's installed ones, its refusals, and LiveCodeBench's test encodings, on real files."""
from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from ternforge import harness
from ternforge.harness_tasks import livecodebench as lcb


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _mmlu_row(i: int, category: str) -> dict:
    return {"question_id": i, "question": "q", "options": ["a", "b"], "answer": "A", "answer_index": 0, "cot_content": "", "category": category, "src": "t"}


def test_tasks_include_lm_evals_own_files_and_replace_only_the_data(tmp_path: Path) -> None:
    import lm_eval.tasks

    mmlu = _jsonl(tmp_path / "mmlu.jsonl", [_mmlu_row(1, "math"), _mmlu_row(2, "computer science")])
    math = _jsonl(tmp_path / "math.jsonl", [{"problem": "1+1", "solution": "\\boxed{2}", "answer": "2", "unique_id": "x"}])
    plan = harness.write_tasks([
        {"benchmark": "mmlu-pro", "format": "json", "files": {"test": [mmlu]}},
        {"benchmark": "math-500", "format": "json", "files": {"test": [math]}},
    ], tmp_path / "tasks")
    assert [p["tasks"] for p in plan] == [["ternforge_mmlu_pro_computer_science", "ternforge_mmlu_pro_math"], ["ternforge_math_500"]]
    builtin = Path(lm_eval.tasks.__file__).parent
    leaf = json.loads((tmp_path / "tasks" / "ternforge_mmlu_pro_math.yaml").read_text())
    assert leaf["include"] == str(builtin / "mmlu_pro" / "mmlu_pro_math.yaml")
    assert leaf["dataset_kwargs"] == {"data_files": {"test": [mmlu]}}
    assert leaf["fewshot_split"] is None  # MMLU-Pro's validation split is not in the files (zero-shot)
    group = json.loads((tmp_path / "tasks" / "ternforge_mmlu_pro.yaml").read_text())
    assert group["task"] == plan[0]["tasks"] and group["aggregate_metric_list"][0]["filter_list"] == "custom-extract"
    m = json.loads((tmp_path / "tasks" / "ternforge_math_500.yaml").read_text())
    assert m["include"] == str(builtin / "minerva_math" / "minerva_math500.yaml") and "fewshot_split" not in m


def test_refusals_name_the_benchmark_and_the_problem(tmp_path: Path) -> None:
    with pytest.raises(harness.HarnessInputError, match="no lm-eval task for benchmark 'hellaswag'"):
        harness.write_tasks([{"benchmark": "hellaswag", "format": "json", "files": {}}], tmp_path)
    with pytest.raises(harness.HarnessInputError, match="math-500: data file .*missing.jsonl does not exist"):
        harness.write_tasks([{"benchmark": "math-500", "format": "json", "files": {"test": [str(tmp_path / "missing.jsonl")]}}], tmp_path)
    with pytest.raises(harness.HarnessInputError, match="data format 'xlsx'"):
        harness.write_tasks([{"benchmark": "math-500", "format": "xlsx", "files": {}}], tmp_path)
    odd = _jsonl(tmp_path / "odd.jsonl", [_mmlu_row(1, "astrology")])
    with pytest.raises(harness.HarnessInputError, match=r"categories lm-eval has no task for: \['astrology'\]"):
        harness.write_tasks([{"benchmark": "mmlu-pro", "format": "json", "files": {"test": [odd]}}], tmp_path)


def test_livecodebench_tests_in_both_encodings_and_functional_form() -> None:
    public = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    private = [{"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"}]
    packed = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(private)))).decode()
    doc = {"question_id": "q", "public_test_cases": json.dumps(public), "private_test_cases": packed}
    assert lcb.tests_of(doc) == [
        {"type": "stdin", "input": "1 2\n", "output": "3\n"},
        {"type": "functional", "args": [[1, 2], 3], "expected": [4, 5]},
    ]
    assert "### Format: Read the inputs from stdin" in lcb.doc_to_text({"question_content": "Add.", "starter_code": ""})
    assert "```python\nclass Solution:" in lcb.doc_to_text({"question_content": "Add.", "starter_code": "class Solution:"})


def test_livecodebench_refuses_a_pickle_that_names_code_and_a_problem_without_tests() -> None:
    class Boom:
        def __reduce__(self):  # noqa: ANN204
            return (print, ("escaped",))

    hostile = base64.b64encode(zlib.compress(pickle.dumps(Boom()))).decode()
    with pytest.raises(pickle.UnpicklingError, match="naming builtins.print is refused"):
        lcb.tests_of({"question_id": "q", "public_test_cases": "", "private_test_cases": hostile})
    with pytest.raises(ValueError, match="q: no tests"):
        lcb.tests_of({"question_id": "q", "public_test_cases": "[]", "private_test_cases": ""})
