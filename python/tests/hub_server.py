"""A local stand-in for the Hugging Face hub, enough for the real `huggingface_hub` client (HF_ENDPOINT=<url>).

Endpoints, as the library calls them:
    GET  /api/models/<org>/<name>/revision/<ref>[?blobs=True]     model_info
    GET  /api/datasets/<org>/<name>/revision/<ref>[?blobs=True]   dataset_info
    HEAD|GET /<org>/<name>/resolve/<ref>/<path>                   hf_hub_download (models)
    HEAD|GET /datasets/<org>/<name>/resolve/<ref>/<path>          hf_hub_download (datasets)
Refs are branches or full commit ids. A repository marked with `gate(kind, repo, allowed_tokens)` lists
`gated: "manual"` and answers its files 401 (X-Error-Code GatedRepo) unless the request carries an allowed token. Like the hub, `.safetensors` and `.parquet` files are LFS files: the
listing carries `lfs: {sha256, size}` and their ETag is the sha256; other files carry the git blob sha1
(`blobId`, and their ETag). Unknown repositories, refs and files answer 404 with the hub's X-Error-Code.
Standalone: `python hub_server.py --spec <spec.json>` serves what the spec file says (replayed whenever it
changes; see from_spec) and prints `HF_ENDPOINT=<url>`; without arguments, a one-file model.
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".parquet", ".bin")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


@dataclass
class Repo:
    refs: dict[str, str] = field(default_factory=dict)  # branch -> commit
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> path -> bytes


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[str] = []  # "METHOD path", in order
        self.gated: dict[tuple[str, str], set[str]] = {}  # (kind, repo) -> tokens that have accepted its terms
        self._server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------ content
    def push(self, kind: str, repo: str, files: dict[str, bytes], branch: str = "main") -> str:
        """A new commit on `branch` holding exactly `files`; returns its id."""
        r = self.repos.setdefault((kind, repo), Repo())
        parent = r.refs.get(branch, "")
        digest = hashlib.sha1(json.dumps([parent, sorted((k, hashlib.sha256(v).hexdigest()) for k, v in files.items())]).encode())
        commit = digest.hexdigest()
        r.commits[commit] = dict(files)
        r.refs[branch] = commit
        return commit

    def rewrite(self, kind: str, repo: str, commit: str, path: str, data: bytes) -> None:
        """Serve other bytes for a file at an existing commit (a tampered mirror); the listing follows them."""
        self.repos[(kind, repo)].commits[commit][path] = data

    def gate(self, kind: str, repo: str, allowed_tokens: set[str]) -> None:
        """Make a repository gated: only requests with one of `allowed_tokens` may read its files."""
        self.gated[(kind, repo)] = set(allowed_tokens)

    # ------------------------------------------------------------ server
    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeHub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                hub._handle(self, body=True)

            def do_HEAD(self) -> None:
                hub._handle(self, body=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ------------------------------------------------------------ routing
    def _lookup(self, kind: str, repo: str, ref: str) -> tuple[str | None, dict[str, bytes] | None, str | None]:
        """(commit, files, error code) for a ref."""
        r = self.repos.get((kind, repo))
        if r is None:
            return None, None, "RepoNotFound"
        commit = r.refs.get(ref, ref)
        if commit not in r.commits:
            return None, None, "RevisionNotFound"
        return commit, r.commits[commit], None

    def _handle(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = urlsplit(h.path).path
        self.requests.append(f"{h.command} {path}")
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if len(parts) >= 6 and parts[0] == "api" and parts[1] in ("models", "datasets") and parts[4] == "revision":
            kind = "model" if parts[1] == "models" else "dataset"
            return self._info(h, kind, f"{parts[2]}/{parts[3]}", "/".join(parts[5:]), body)
        kind = "model"
        if parts and parts[0] == "datasets":
            kind, parts = "dataset", parts[1:]
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._file(h, kind, f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), body)
        self._error(h, 404, "EntryNotFound", body)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, body: bool) -> None:
        payload = json.dumps({"error": code}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        if body:
            h.wfile.write(payload)

    def _info(self, h: BaseHTTPRequestHandler, kind: str, repo: str, ref: str, body: bool) -> None:
        commit, files, code = self._lookup(kind, repo, ref)
        if code is not None:
            return self._error(h, 404, code, body)
        assert files is not None
        siblings = []
        for name in sorted(files):
            data = files[name]
            s: dict[str, object] = {"rfilename": name, "size": len(data), "blobId": git_blob_sha1(data)}
            if name.endswith(LFS_SUFFIXES):
                s["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
            siblings.append(s)
        gated = "manual" if (kind, repo) in self.gated else False
        payload = json.dumps({"id": repo, "sha": commit, "siblings": siblings, "private": False, "gated": gated}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        if body:
            h.wfile.write(payload)

    def _file(self, h: BaseHTTPRequestHandler, kind: str, repo: str, ref: str, name: str, body: bool) -> None:
        commit, files, code = self._lookup(kind, repo, ref)
        if code is not None:
            return self._error(h, 404, code, body)
        assert files is not None and commit is not None
        if name not in files:
            return self._error(h, 404, "EntryNotFound", body)
        allowed = self.gated.get((kind, repo))
        if allowed is not None and h.headers.get("Authorization", "").removeprefix("Bearer ") not in allowed:
            return self._error(h, 401, "GatedRepo", body)
        data = files[name]
        etag = hashlib.sha256(data).hexdigest() if name.endswith(LFS_SUFFIXES) else git_blob_sha1(data)
        h.send_response(200)
        h.send_header("X-Repo-Commit", commit)
        h.send_header("ETag", f'"{etag}"')
        h.send_header("Content-Length", str(len(data)))
        h.send_header("Content-Type", "application/octet-stream")
        h.end_headers()
        if body:
            h.wfile.write(data)


def from_spec(hub: FakeHub, spec: dict) -> None:
    """Replay a JSON spec: {"pushes": [{kind, repo, branch?, files: {path: text}}], "rewrites": [{kind, repo, push, path, text}],
    "gates": [{kind, repo, tokens: [...]}]} (`push` is the index of the push whose commit gets other bytes)."""
    hub.repos.clear()
    hub.gated.clear()
    for g in spec.get("gates", []):
        hub.gate(g["kind"], g["repo"], set(g.get("tokens", [])))
    commits = [hub.push(p["kind"], p["repo"], {k: v.encode() for k, v in p["files"].items()}, p.get("branch", "main")) for p in spec.get("pushes", [])]
    for r in spec.get("rewrites", []):
        hub.rewrite(r["kind"], r["repo"], commits[r["push"]], r["path"], r["text"].encode())


class SpecHub(FakeHub):
    """A FakeHub whose content is a spec file, replayed whenever the file changes (for tests in other languages)."""

    def __init__(self, spec_path: str) -> None:
        super().__init__()
        self.spec_path = spec_path
        self._seen: bytes | None = None
        self._lock = threading.Lock()

    def _handle(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        with self._lock:
            text = open(self.spec_path, "rb").read()
            if text != self._seen:
                from_spec(self, json.loads(text))
                self._seen = text
        super()._handle(h, body)


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--spec":
        hub: FakeHub = SpecHub(sys.argv[2])
    else:
        hub = FakeHub()
        hub.push("model", "org/model", {"config.json": b"{}\n"})
    hub.start()
    print(f"HF_ENDPOINT={hub.url}", flush=True)
    threading.Event().wait()
