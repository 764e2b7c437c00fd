"""LiveCodeBench rows for the ternforge_livecodebench lm-eval task: the prompt, and the tests in the sandbox's form.

LiveCodeBench stores each problem's tests as `public_test_cases` (a JSON list of {input, output, testtype}) and
`private_test_cases` (the same list as JSON, or base64 of zlib of a pickled JSON string). `tests_json` is both,
in lib/eval/code-sandbox.ts's form: {"type": "stdin", input, output} or {"type": "functional", args, expected}
(a functional test's input holds one JSON argument per line; `metadata.func_name` names the function).
"""
from __future__ import annotations

import base64
import io
import json
import pickle
import zlib

WITH_STARTER = "You will use the following starter code to write the solution to the problem and enclose your code within delimiters."
WITHOUT_STARTER = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the sample inputs). "
    "Enclose your code within delimiters as follows. Ensure that when the python program runs, it reads the inputs, runs the algorithm and writes output to STDOUT."
)


class _StringsOnly(pickle.Unpickler):
    """The private tests are a pickled str: refuse any pickle that names a class or function (code execution)."""

    def find_class(self, module: str, name: str):  # noqa: ANN201
        raise pickle.UnpicklingError(f"livecodebench private tests: a pickle naming {module}.{name} is refused")


def _cases(field: str) -> list[dict]:
    if field is None or field == "":
        return []
    try:
        return json.loads(field)
    except json.JSONDecodeError:
        raw = zlib.decompress(base64.b64decode(field))
        text = _StringsOnly(io.BytesIO(raw)).load()
        if not isinstance(text, str):
            raise ValueError("livecodebench private tests: the pickle does not hold a JSON string")
        return json.loads(text)


def tests_of(doc: dict) -> list[dict]:
    out = []
    for case in _cases(doc.get("public_test_cases")) + _cases(doc.get("private_test_cases")):
        if case["testtype"] == "stdin":
            out.append({"type": "stdin", "input": case["input"], "output": case["output"]})
        elif case["testtype"] == "functional":
            out.append({"type": "functional", "args": [json.loads(a) for a in case["input"].split("\n") if a.strip() != ""], "expected": json.loads(case["output"])})
        else:
            raise ValueError(f"livecodebench {doc.get('question_id')}: unknown test type {case['testtype']!r}")
    if not out:
        raise ValueError(f"livecodebench {doc.get('question_id')}: no tests")
    return out


def process_docs(dataset):  # noqa: ANN001, ANN201 - a datasets.Dataset
    def _doc(doc: dict) -> dict:
        meta = json.loads(doc["metadata"]) if doc.get("metadata") else {}
        return {"tests_json": json.dumps(tests_of(doc)), "fn_name": meta.get("func_name") or ""}

    return dataset.map(_doc)


def doc_to_text(doc: dict) -> str:
    prompt = f"### Question:\n{doc['question_content']}\n\n"
    if doc.get("starter_code"):
        prompt += f"### Format: {WITH_STARTER}\n```python\n{doc['starter_code']}\n```\n\n"
    else:
        prompt += f"### Format: {WITHOUT_STARTER}\n```python\n# YOUR CODE HERE\n```\n\n"
    return prompt + "### Answer: (use the provided format with backticks)\n\n"


def doc_to_target(doc: dict) -> str:
    return ""


def process_results(doc: dict, results: list[str]) -> dict[str, int]:
    return {"nonempty": int(bool(results[0].strip()))}
