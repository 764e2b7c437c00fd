"""Locked hub revisions: resolve a requested ref to its commit and file hashes; fetch at the locked commit.

A pin request names a hub repository (a model or a dataset), the ref the profile asks for (a branch, a tag
or a commit) and the files wanted (`files`, or for a model every file fetch-model copies, ALLOW_PATTERNS).
`resolve` asks the hub, through `huggingface_hub`'s own `HfApi.model_info` / `dataset_info` with
`files_metadata=True`, for the commit the ref points at and each file's size and hash as the hub lists it:
the LFS sha256 for LFS files (weights, parquet), the git blob sha1 for the small files git stores itself
(config.json). Every request is tried; the ones that cannot be resolved are returned together, so one error
can list all of them.

`download` fetches one locked file with `hf_hub_download(revision=<commit>)` (the library's own cache) and
refuses bytes whose size or hash differs from the lock, naming the file, the expected and the actual value.

`python -m ternforge hub-resolve --config <json>`: {"sources": [request...]} -> a `result` event with the
resolved entries, or a `failure` event (reason `unresolvable-sources`) listing every source that failed.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..events import emit, log
from .checkpoint import SourceError

KINDS = ("model", "dataset")
# The files fetch-model copies from a model repository (by base name).
ALLOW_PATTERNS = (
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "*.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
)
_CHUNK = 1 << 22


@dataclass(frozen=True)
class PinRequest:
    """One source a stage pins: `name` is its key in the lock (the model, or a calibration source's name)."""

    name: str
    kind: str  # "model" | "dataset"
    repo: str
    ref: str
    files: tuple[str, ...] | None = None  # None: every file of the repository matching ALLOW_PATTERNS

    @staticmethod
    def from_json(d: dict[str, Any]) -> "PinRequest":
        files = d.get("files")
        return PinRequest(name=str(d["name"]), kind=str(d["kind"]), repo=str(d["repo"]), ref=str(d["ref"]),
                          files=None if files is None else tuple(str(f) for f in files))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind, "repo": self.repo, "ref": self.ref}
        if self.files is not None:
            d["files"] = list(self.files)
        return d


class Unresolvable(Exception):
    """One request the hub could not answer (no such repository, ref or file; offline)."""


def endpoint() -> str | None:
    """`HF_ENDPOINT` when set (a mirror, or the tests' local hub), read at call time."""
    return os.environ.get("HF_ENDPOINT") or None


def wanted(name: str) -> bool:
    return not any(part.startswith(".") for part in name.split("/")) and any(
        fnmatch.fnmatch(name.rsplit("/", 1)[-1], pat) for pat in ALLOW_PATTERNS)


def resolve_one(req: PinRequest, api: Any) -> dict[str, Any]:
    """The lock entry for one request: {request, commit, files: {name: {size, sha256 | git_sha1}}}."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if req.kind not in KINDS:
        raise Unresolvable(f"unknown kind {req.kind!r} (model, dataset)")
    info_of = api.model_info if req.kind == "model" else api.dataset_info
    try:
        info = info_of(req.repo, revision=req.ref, files_metadata=True)
    except RevisionNotFoundError:
        raise Unresolvable(f"{req.kind} {req.repo} has no branch, tag or commit {req.ref!r}") from None
    except RepositoryNotFoundError:
        raise Unresolvable(f"{req.kind} repository {req.repo} does not exist (or is private)") from None
    except HfHubHTTPError as e:
        raise Unresolvable(f"the hub answered {req.kind} {req.repo}@{req.ref} with an error: {_first_line(e)}") from None
    except Exception as e:  # offline, DNS, refused connection: this machine cannot reach the hub
        raise Unresolvable(f"cannot reach the hub for {req.kind} {req.repo}@{req.ref} ({type(e).__name__}: {_first_line(e)})") from None
    if not info.sha:
        raise Unresolvable(f"the hub listed no commit for {req.kind} {req.repo}@{req.ref}")
    listed = {s.rfilename: s for s in (info.siblings or [])}
    names = sorted(n for n in listed if wanted(n)) if req.files is None else list(req.files)
    missing = [n for n in names if n not in listed]
    if missing:
        raise Unresolvable(f"{req.kind} {req.repo}@{req.ref} (commit {info.sha}) has no file {', '.join(missing)}")
    if not names:
        what = "no file fetch-model copies" if req.files is None else "no files declared to read"
        raise Unresolvable(f"{req.kind} {req.repo}@{req.ref} (commit {info.sha}): {what}")
    files: dict[str, dict[str, Any]] = {}
    for n in names:
        s = listed[n]
        if s.lfs is not None:
            files[n] = {"size": int(s.lfs.size), "sha256": str(s.lfs.sha256)}
        elif s.blob_id is not None and s.size is not None:
            files[n] = {"size": int(s.size), "git_sha1": str(s.blob_id)}
        else:
            raise Unresolvable(f"the hub listed no size or hash for {n} of {req.repo}@{info.sha}")
    return {"request": req.to_json(), "commit": str(info.sha), "files": files}


def resolve(requests: list[PinRequest]) -> tuple[dict[str, dict[str, Any]], list[dict[str, str]]]:
    """Every request tried: (name -> lock entry, [{name, repo, ref, error}] for those that failed)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint())
    done: dict[str, dict[str, Any]] = {}
    failed: list[dict[str, str]] = []
    for req in requests:
        try:
            done[req.name] = resolve_one(req, api)
            log(f"hub: {req.name}: {req.kind} {req.repo}@{req.ref} -> {done[req.name]['commit']} ({len(done[req.name]['files'])} files)")
        except Unresolvable as e:
            failed.append({"name": req.name, "repo": req.repo, "ref": req.ref, "error": str(e)})
    return done, failed


def check_access(req: PinRequest, api: Any, commit: str | None = None) -> dict[str, Any]:
    """Whether this machine can read a source, without downloading it (the preflight): the listing at the
    locked `commit` (else the requested ref, as `resolve_one` reads it), then, for a gated repository, whether
    a token is configured (HF_TOKEN or `hf auth login`) and the hub lets it read the first wanted file (a HEAD
    request). Returns {name, kind, repo, ref, commit, gated, token, files, bytes, ok, error}."""
    from huggingface_hub import get_token, hf_hub_url
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError

    token = get_token()
    out: dict[str, Any] = {"name": req.name, "kind": req.kind, "repo": req.repo, "ref": req.ref, "commit": commit,
                           "gated": None, "token": token is not None, "files": 0, "bytes": 0, "ok": False, "error": None}
    at = PinRequest(req.name, req.kind, req.repo, commit or req.ref, req.files)
    try:
        entry = resolve_one(at, api)
    except Unresolvable as e:
        out["error"] = str(e)
        return out
    out.update(commit=entry["commit"], files=len(entry["files"]), bytes=sum(f["size"] for f in entry["files"].values()))
    info = (api.model_info if req.kind == "model" else api.dataset_info)(req.repo, revision=entry["commit"])
    gated = getattr(info, "gated", False)
    out["gated"] = gated if gated else False
    if gated and token is None:
        out["error"] = (f"{req.kind} {req.repo} is gated ({gated}): accept its terms on the hub with your account, then "
                        "set HF_TOKEN (or run `hf auth login`) on this machine")
        return out
    first = sorted(entry["files"])[0]
    try:
        api.get_hf_file_metadata(url=hf_hub_url(req.repo, first, repo_type=req.kind, revision=entry["commit"],
                                                endpoint=endpoint()), token=token)
    except GatedRepoError:
        out["error"] = (f"{req.kind} {req.repo} is gated ({gated}) and the configured token may not read it: accept its "
                        "terms on the hub with the token's account")
        return out
    except HfHubHTTPError as e:
        out["error"] = f"the hub refused {req.repo}@{entry['commit'][:12]}/{first}: {_first_line(e)}"
        return out
    except Exception as e:
        out["error"] = f"cannot reach the hub for {req.repo}/{first} ({type(e).__name__}: {_first_line(e)})"
        return out
    out["ok"] = True
    return out


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


def git_blob_sha1(path: Path) -> str:
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def hashes(path: Path, locked: dict[str, Any]) -> dict[str, str]:
    """The file's sha256, plus its git blob sha1 when the lock records that (one read)."""
    sha = hashlib.sha256()
    git = hashlib.sha1(f"blob {path.stat().st_size}\0".encode()) if "git_sha1" in locked else None
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            if git is not None:
                git.update(chunk)
    out = {"sha256": sha.hexdigest()}
    if git is not None:
        out["git_sha1"] = git.hexdigest()
    return out


def check_bytes(name: str, size: int, actual: dict[str, str], locked: dict[str, Any], where: str) -> None:
    """Refuse a file whose size or hash differs from its lock entry (SourceError `hash-mismatch`)."""
    if size != locked["size"]:
        raise SourceError("hash-mismatch", f"{where}: {name}: expected {locked['size']} bytes (the lock), got {size}",
                          file=name, expected_size=locked["size"], actual_size=size)
    for algo in ("sha256", "git_sha1"):
        if algo in locked and actual.get(algo) != locked[algo]:
            raise SourceError("hash-mismatch", f"{where}: {name}: expected {algo} {locked[algo]} (the lock), got {actual.get(algo)}; "
                              f"the bytes differ from the locked revision (run `tsx pipeline.ts lock --update` only if the change is wanted)",
                              file=name, algorithm=algo, expected=locked[algo], actual=actual.get(algo))


def download(entry: dict[str, Any], name: str, cache_dir: str | None = None) -> Path:
    """One locked file through `hf_hub_download` at the locked commit, checked against the lock."""
    from huggingface_hub import hf_hub_download

    repo, kind, commit = entry["request"]["repo"], entry["request"]["kind"], entry["commit"]
    locked = entry["files"].get(name)
    if locked is None:
        raise SourceError("unlocked-file", f"{repo}: {name} is not in the lock (run `tsx pipeline.ts lock --update`)", file=name, repo=repo)
    try:
        path = Path(hf_hub_download(repo_id=repo, filename=name, repo_type=kind, revision=commit, cache_dir=cache_dir, endpoint=endpoint()))
    except Exception as e:
        raise SourceError("download-failed", f"cannot download {repo}@{commit[:12]}/{name} ({type(e).__name__}: {_first_line(e)})",
                          repo=repo, commit=commit, file=name) from e
    check_bytes(name, path.stat().st_size, hashes(path, locked), locked, f"{repo}@{commit[:12]}")
    return path


def main(config: dict[str, Any]) -> dict[str, Any]:
    """The worker command `hub-resolve`."""
    requests = [PinRequest.from_json(s) for s in config["sources"]]
    done, failed = resolve(requests)
    if failed:
        lines = [f"{f['name']} ({f['repo']}@{f['ref']}): {f['error']}" for f in failed]
        message = f"{len(failed)} of {len(requests)} hub sources cannot be resolved:\n" + "\n".join(f"  {line}" for line in lines)
        emit("failure", reason="unresolvable-sources", message=message, unresolvable=failed)
        return {"ok": False}
    return {"ok": True, "sources": done}
