"""A loopback stand-in for the Hugging Face Hub, for the publishing tests (127.0.0.1 only).

It implements, in memory, the HTTP routes huggingface_hub and datasets use to create a dataset repo,
commit files, tag a commit and read a revision back:

    POST /api/repos/create                      (an initial commit with .gitattributes, as the Hub does)
    POST /api/validate-yaml                     the README header must be a mapping without duplicate keys
    GET  /api/datasets/{repo}[/revision/{rev}]  repo info with siblings
    GET  /api/datasets/{repo}/refs              branches and tags
    POST /api/datasets/{repo}/preupload/{rev}   answers "regular" for every file
    POST /api/datasets/{repo}/commit/{rev}      NDJSON commit; 412 when parentCommit is not the head
    POST /api/datasets/{repo}/tag/{rev}         409 when the tag exists
    GET  /api/datasets/{repo}/tree/{rev}[/path] and POST .../paths-info/{rev}
    HEAD/GET /datasets/{repo}/resolve/{rev}/{path}   with Range requests

What it does NOT cover of the Hub: authentication and permissions (any token, or none, is accepted;
`private` is recorded but not enforced); LFS and Xet storage (every file is committed as a regular
base64 blob, so the LFS batch API and hf_xet uploads are never exercised); pull requests, branches
other than main, commit listings, deletions of repos, rate limits, pagination, the dataset viewer and
parquet conversions; persistence (all is lost when the server stops). Commit ids are sha1 digests of
the commit content, not git's object ids.

It plays no part in the git mirror (`hsi publish --to-git`): the read side of that path is covered by
a real Hugging Face-compatible mirror, olah serving the local git repository, in
tests/hf_scripts/test_git_mirror_olah.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

import yaml

REPO = r"(?P<kind>datasets|models|spaces)/(?P<repo>[^/]+/[^/]+)"


@dataclass
class Commit:
    parent: str | None
    files: dict[str, bytes]
    message: str


@dataclass
class Repo:
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def commit(self, parent: str | None, files: dict[str, bytes], message: str) -> str:
        digest = hashlib.sha1(
            json.dumps([parent, message, sorted((p, hashlib.sha256(b).hexdigest()) for p, b in files.items())]).encode()
        )
        sha = digest.hexdigest()
        self.commits[sha] = Commit(parent, files, message)
        self.branches["main"] = sha
        return sha

    def resolve(self, revision: str) -> str | None:
        revision = unquote(revision)
        if revision in self.branches:
            return self.branches[revision]
        if revision in self.tags:
            return self.tags[revision]
        return revision if revision in self.commits else None


class HubState:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.lock = threading.Lock()
        self.requests: list[str] = []  # "METHOD path" of every request, for tests to assert on
        # "METHOD path-prefix" -> (status, message): requests answered with that error, for tests of
        # a failing or refusing Hub (a 500, a bad token's 401)
        self.faults: dict[str, tuple[int, str]] = {}


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Handler(BaseHTTPRequestHandler):
    state: HubState
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    # ------------------------------------------------------------ helpers

    def reply(self, status: int, payload=None, headers: dict | None = None, body: bytes | None = None) -> None:
        data = body if body is not None else (json.dumps(payload).encode() if payload is not None else b"")
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if body is None:
            self.send_header("Content-Type", "application/json")
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def error(self, status: int, message: str, code: str | None = None) -> None:
        self.reply(
            status,
            {"error": message},
            {"X-Error-Code": code, "X-Error-Message": message} if code else {"X-Error-Message": message},
        )

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def repo_or_404(self, name: str) -> Repo | None:
        repo = self.state.repos.get(name)
        if repo is None:
            self.error(404, f"Repository {name} not found", "RepoNotFound")
        return repo

    def commit_or_404(self, repo: Repo, revision: str) -> tuple[str, Commit] | None:
        sha = repo.resolve(revision)
        if sha is None:
            self.error(404, f"Revision {unquote(revision)} not found", "RevisionNotFound")
            return None
        return sha, repo.commits[sha]

    # ------------------------------------------------------------ routing

    def route(self) -> None:
        url = urlparse(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        self.state.requests.append(f"{self.command} {path}")
        for prefix, (status, message) in list(self.state.faults.items()):
            if f"{self.command} {path}".startswith(prefix):
                return self.error(status, message)
        routes = [
            ("POST", r"/api/repos/create", self.create_repo),
            ("POST", r"/api/validate-yaml", self.validate_yaml),
            ("GET", rf"/api/{REPO}/refs", self.refs),
            ("POST", rf"/api/{REPO}/preupload/(?P<rev>.+)", self.preupload),
            ("POST", rf"/api/{REPO}/commit/(?P<rev>.+)", self.commit),
            ("POST", rf"/api/{REPO}/tag/(?P<rev>.+)", self.tag),
            ("GET", rf"/api/{REPO}/tree/(?P<rev>[^/]+)(?:/(?P<sub>.*))?", self.tree),
            ("POST", rf"/api/{REPO}/paths-info/(?P<rev>.+)", self.paths_info),
            ("GET", rf"/api/{REPO}(?:/revision/(?P<rev>.+))?", self.info),
            ("GET", rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.resolve_file),
            ("HEAD", rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.resolve_file),
        ]
        for method, pattern, handler in routes:
            match = re.fullmatch(pattern, path)
            if match and method == self.command:
                with self.state.lock:
                    return handler(query=query, **{k: v for k, v in match.groupdict().items() if k != "kind"})
        self.error(404, f"no route for {self.command} {path} in the loopback hub")

    do_GET = do_POST = do_HEAD = route

    # ------------------------------------------------------------ write side

    def create_repo(self, query) -> None:
        payload = json.loads(self.body() or b"{}")
        name = f"{payload.get('organization') or 'user'}/{payload['name']}"
        if name in self.state.repos:
            return self.error(409, "You already created this dataset repo", None)
        repo = Repo(private=payload.get("visibility") == "private" or bool(payload.get("private")))
        repo.commit(None, {".gitattributes": b"*.tar filter=lfs diff=lfs merge=lfs -text\n"}, "initial commit")
        self.state.repos[name] = repo
        self.reply(200, {"url": f"http://{self.headers['Host']}/datasets/{name}", "name": name})

    def validate_yaml(self, query) -> None:
        """Only that the README's header is a YAML mapping without duplicate keys (the Hub checks
        far more: licence ids, task categories, config schemas)."""
        from datasets.utils.metadata import _NoDuplicateSafeLoader, _split_yaml_from_readme

        block, _ = _split_yaml_from_readme(json.loads(self.body())["content"])
        try:
            metadata = yaml.load(block or "", Loader=_NoDuplicateSafeLoader)
        except (TypeError, yaml.YAMLError) as exc:
            return self.reply(400, {"errors": [{"message": str(exc)}], "warnings": []})
        if block is not None and not isinstance(metadata, dict):
            return self.reply(400, {"errors": [{"message": "metadata must be a mapping"}], "warnings": []})
        self.reply(200, {"errors": [], "warnings": []})

    def preupload(self, repo: str, rev: str, query) -> None:
        if self.repo_or_404(repo) is None:
            return
        files = json.loads(self.body())["files"]
        self.reply(
            200,
            {
                "files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files],
                "commitOid": None,
            },
        )

    def commit(self, repo: str, rev: str, query) -> None:
        target = self.repo_or_404(repo)
        if target is None:
            return
        lines = [json.loads(line) for line in self.body().decode().splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        head = target.branches.get(unquote(rev))
        if head is None:
            return self.error(404, f"branch {unquote(rev)} not found", "RevisionNotFound")
        if header.get("parentCommit") and header["parentCommit"] != head:
            return self.error(412, "A commit has happened since. Please refresh and try again.")
        files = dict(target.commits[head].files)
        for line in lines:
            value = line["value"]
            if line["key"] == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif line["key"] == "deletedFile":
                files.pop(value["path"], None)
            elif line["key"] != "header":
                return self.error(400, f"the loopback hub does not support {line['key']!r} operations")
        sha = target.commit(head, files, header.get("summary", ""))
        self.reply(
            200,
            {
                "success": True,
                "commitOid": sha,
                "commitUrl": f"http://{self.headers['Host']}/datasets/{repo}/commit/{sha}",
            },
        )

    def tag(self, repo: str, rev: str, query) -> None:
        target = self.repo_or_404(repo)
        if target is None:
            return
        found = self.commit_or_404(target, rev)
        if found is None:
            return
        name = json.loads(self.body())["tag"]
        if name in target.tags:
            return self.error(409, f"Tag {name} already exists")
        target.tags[name] = found[0]
        self.reply(200, {})

    # ------------------------------------------------------------ read side

    def refs(self, repo: str, query) -> None:
        target = self.repo_or_404(repo)
        if target is None:
            return
        ref = lambda kind, name, sha: {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha}  # noqa: E731
        self.reply(
            200,
            {
                "branches": [ref("heads", n, s) for n, s in sorted(target.branches.items())],
                "tags": [ref("tags", n, s) for n, s in sorted(target.tags.items())],
                "converts": [],
            },
        )

    def info(self, repo: str, query, rev: str | None = None) -> None:
        target = self.repo_or_404(repo)
        if target is None:
            return
        found = self.commit_or_404(target, rev or "main")
        if found is None:
            return
        sha, commit = found
        self.reply(
            200,
            {
                "id": repo,
                "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
                "author": repo.split("/")[0],
                "sha": sha,
                "private": target.private,
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "lastModified": "2025-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": p, "size": len(b)} for p, b in sorted(commit.files.items())],
            },
        )

    def entries(self, commit: Commit, sub: str, recursive: bool) -> list[dict]:
        prefix = f"{sub.strip('/')}/" if sub.strip("/") else ""
        out: dict[str, dict] = {}
        for path, data in sorted(commit.files.items()):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :].split("/")
            for depth in range(1, len(rest)):
                folder = prefix + "/".join(rest[:depth])
                if recursive or depth == 1:
                    out.setdefault(
                        folder,
                        {
                            "type": "directory",
                            "path": folder,
                            "oid": hashlib.sha1(folder.encode()).hexdigest(),
                            "size": 0,
                        },
                    )
                if not recursive:
                    break
            if recursive or len(rest) == 1:
                out[path] = {"type": "file", "path": path, "size": len(data), "oid": git_blob_sha(data)}
        return [out[k] for k in sorted(out)]

    def tree(self, repo: str, rev: str, query, sub: str | None = None) -> None:
        target = self.repo_or_404(repo)
        found = target and self.commit_or_404(target, rev)
        if not found:
            return
        commit = found[1]
        sub = sub or ""
        if sub and sub not in commit.files and not any(p.startswith(sub.rstrip("/") + "/") for p in commit.files):
            return self.error(404, f"{sub} not found", "EntryNotFound")
        self.reply(200, self.entries(commit, sub, query.get("recursive", ["false"])[0].lower() in ("true", "1")))

    def paths_info(self, repo: str, rev: str, query) -> None:
        target = self.repo_or_404(repo)
        found = target and self.commit_or_404(target, rev)
        if not found:
            return
        raw = self.body()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            paths = json.loads(raw).get("paths", [])
        else:
            paths = parse_qs(raw.decode()).get("paths", [])
        commit, result = found[1], []
        for path in paths:
            path = path.strip("/")
            if path in commit.files:
                result.append(
                    {
                        "type": "file",
                        "path": path,
                        "size": len(commit.files[path]),
                        "oid": git_blob_sha(commit.files[path]),
                    }
                )
            elif any(p.startswith(path + "/") for p in commit.files) or path == "":
                result.append(
                    {"type": "directory", "path": path, "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0}
                )
        self.reply(200, result)

    def resolve_file(self, repo: str, rev: str, file: str, query) -> None:
        target = self.repo_or_404(repo)
        found = target and self.commit_or_404(target, rev)
        if not found:
            return
        sha, commit = found
        if file not in commit.files:
            return self.error(404, f"Entry {file} not found", "EntryNotFound")
        data = commit.files[file]
        headers = {
            "X-Repo-Commit": sha,
            "ETag": f'"{git_blob_sha(data)}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "") or "")
        if match and data:
            start = int(match.group(1)) if match.group(1) else max(0, len(data) - int(match.group(2)))
            end = int(match.group(2)) if match.group(1) and match.group(2) else len(data) - 1
            end = min(end, len(data) - 1)
            chunk = data[start : end + 1]
            headers.update({"Content-Range": f"bytes {start}-{end}/{len(data)}", "Content-Length": str(len(chunk))})
            return self.reply(206, headers=headers, body=chunk)
        headers["Content-Length"] = str(len(data))
        self.reply(200, headers=headers, body=data)


class LoopbackHub:
    """Start with `with LoopbackHub() as hub:`; `hub.endpoint` is the base URL for HF_ENDPOINT."""

    def __init__(self) -> None:
        self.state = HubState()
        handler = type("BoundHandler", (Handler,), {"state": self.state})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> LoopbackHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":  # manual use: python tests/hub_server.py, then HF_ENDPOINT=<printed url>
    import time

    with LoopbackHub() as hub:
        print(hub.endpoint, flush=True)
        while True:
            time.sleep(3600)


def hub_env(endpoint: str, home, token: str = "hf_loopback_test_token") -> dict:
    """The environment of a fresh `hsi` process pointed at the loopback hub (HF_ENDPOINT is read at import)."""
    import os

    return dict(
        os.environ,
        HF_ENDPOINT=endpoint,
        HF_HUB_OFFLINE="0",
        HF_DATASETS_OFFLINE="0",
        HF_TOKEN=token,
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
    )
