"""Docs that cannot drift (issue 53, item 1): the README's tour (steps 1–6) and docs/platforms.md's walk-through are
run as written, on the real node, and every answer they show is compared field by field with what the service
answers (tests/helpers/doc_walk.py reads the commands and answers and holds the comparison rule: elisions, scores to
the shown precision); `make run PORT=… OPENSEARCH_PORT=…` is run with its printed curls.

Each command runs in bash from the repository's folder, in one session as a reader keeps it (the exports and the
venv's activation of step 1 carry over; tests/helpers/doc_walk.py's Example is the command as shown). What the test
changes in a command, and why (SUBSTITUTIONS' table below, nothing else):
- `examples/config.toml` → a copy whose alias (and access record index) is this module's own, so the answers are
  the sample corpus's alone and no other test's indices are touched;
- `127.0.0.1:8080` and `--port 8080` → a free port, beside anything on 8080;
- step 3's folder line runs into a knowledge base of its own, on a folder of one file (the README: "The answers
  below are those of the sample corpus alone");
- `scripts/opensearch-local start` runs as written (with OPENSEARCH_PORT of the test's node) when the test's node is
  that script's on 127.0.0.1; only a node found elsewhere (OPENSEARCH_URL, testcontainers) is named instead.
Not run: `scripts/opensearch-local stop` and `docker compose down` of step 6 (they would stop the node every test
uses) and `make test` (this is part of it).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import doc_walk
from helpers.served import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PLATFORMS = (ROOT / "docs" / "platforms.md").read_text(encoding="utf-8")
TOUR_HEADING = "A 5-minute tour"
TOUR = doc_walk.examples(README, TOUR_HEADING)
WALKS = {"README.md": TOUR, "docs/platforms.md": doc_walk.examples(PLATFORMS)}
SHOWN_PORT = "127.0.0.1:8080"
DEMO_ALIAS = 'alias = "kb-project-documents"'
CLEAN_ENV = ("PROJECT_CALLBACK_KEY", "AGENTARTS_KEY", "WORKBENCH_KEY", "OPENSEARCH_URL", "CONFIG", "PORT",
             "OPENSEARCH_PORT", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")


def _is_setup(example: doc_walk.Example) -> bool:
    """The tour's commands that build the demo (run in order by the fixture): all without a shown answer but the
    requests."""
    return example.answer is None and not example.command.startswith("curl ")


ASKED = [(doc, example) for doc, found in WALKS.items() for example in found
         if not (doc == "README.md" and _is_setup(example))]


@dataclass
class Demo:
    base: str
    port: int
    alias: str
    config: Path
    folder_config: Path
    folder: Path
    node_url: str
    local_port: str | None  # the test node's port when it is scripts/opensearch-local's on 127.0.0.1
    env: dict[str, str]
    outputs: dict[int, str]  # the setup commands' output, by the line they are shown at

    def substituted(self, command: str) -> str:
        """SUBSTITUTIONS: what the test changes in a shown command (the module's docstring says why)."""
        text = command.replace(SHOWN_PORT, f"127.0.0.1:{self.port}").replace("--port 8080", f"--port {self.port}")
        if "path/to/folder/" in text:
            text = text.replace("examples/config.toml", str(self.folder_config))
            text = text.replace("path/to/folder/", f"{self.folder}/")
        text = text.replace("examples/config.toml", str(self.config))
        if "scripts/opensearch-local start" in text and self.local_port is None:
            text = text.replace("scripts/opensearch-local start", f"echo {self.node_url}")
        return text

    def run(self, command: str, *, keep: bool = False, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`command` (substituted) in bash, in the session's environment; `keep`: the environment it leaves is the
        session's from now on (exports, activation)."""
        with tempfile.NamedTemporaryFile(prefix="docs-env-") as dump:
            script = f"set -eo pipefail\n{self.substituted(command)}\nenv -0 > {dump.name}\n"
            done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=self.env, capture_output=True, text=True,
                                  timeout=timeout)
            if keep and done.returncode == 0:
                pairs = Path(dump.name).read_bytes().decode().split("\0")
                self.env = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        return done


def _own_config(folder: Path, name: str, alias: str) -> Path:
    """examples/config.toml with `alias` and an access record index and spool of its own."""
    text = (ROOT / "examples" / "config.toml").read_text(encoding="utf-8")
    assert text.count(DEMO_ALIAS) == 1, "the demo's alias line moved: update DEMO_ALIAS"
    text = text.replace(DEMO_ALIAS, f'alias = "{alias}"')
    text += f'\n[access_log]\nindex = "{alias}-access"\nspool_dir = "{folder / (name + "-spool")}"\n'
    path = folder / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _local_port(url: str) -> str | None:
    found = re.fullmatch(r"http://127\.0\.0\.1:(\d+)", url)
    if found is None:
        return None
    status = subprocess.run([str(ROOT / "scripts" / "opensearch-local"), "status"], capture_output=True,
                            env={**os.environ, "OPENSEARCH_PORT": found.group(1)})
    return found.group(1) if status.returncode == 0 else None


def _wait_for(url: str, process: subprocess.Popen[Any], log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # answering (a 401 or 503 is an answer)
        except OSError:
            assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {seconds} s:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen[Any]) -> None:
    """The process group this test started (bash or make, and the server they run)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _drop(node_url: str, alias: str) -> None:
    request = urllib.request.Request(f"{node_url}/{alias}*?expand_wildcards=all", method="DELETE")
    with urllib.request.urlopen(request, timeout=30):
        pass


@pytest.fixture(scope="module")
def demo(opensearch: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """Steps 1–4 of the tour as written (but SUBSTITUTIONS), in order; the server of step 4 runs until the end."""
    folder = tmp_path_factory.mktemp("docs")
    alias = f"test-docs-{uuid.uuid4().hex}"
    files = folder / "files"
    files.mkdir()
    (files / "notes.md").write_text("# Site notes\n\nThe installation notes of team-a.\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    local_port = _local_port(opensearch.url)
    if local_port is not None:
        env["OPENSEARCH_PORT"] = local_port
    port = free_port()
    made = Demo(f"http://127.0.0.1:{port}", port, alias, _own_config(folder, "config", alias),
                _own_config(folder, "files", f"{alias}-files"), files, opensearch.url, local_port, env, {})
    server: subprocess.Popen[Any] | None = None
    try:
        for example in filter(_is_setup, TOUR):
            if example.command.startswith("es-provider serve"):
                log = folder / "serve.log"
                with log.open("w") as sink:
                    server = subprocess.Popen(["bash", "-c", f"exec {made.substituted(example.command)}"], cwd=ROOT,
                                              env=made.env, stdout=sink, stderr=subprocess.STDOUT,
                                              start_new_session=True)
                _wait_for(f"{made.base}/healthz", server, log)
                continue
            done = made.run(example.command, keep=True)
            assert done.returncode == 0, f"README.md:{example.line} {example.command}\n{done.stdout}\n{done.stderr}"
            made.outputs[example.line] = done.stdout + done.stderr
            if example.command.startswith("es-provider kb create"):  # the folder line's own knowledge base
                own = made.run(example.command.replace("examples/config.toml", str(made.folder_config)))
                assert own.returncode == 0, own.stderr
        assert server is not None, "the tour serves (step 4)"
        yield made
    finally:
        if server is not None:
            _stop(server)
        _drop(opensearch.url, alias)


def _example_id(pair: tuple[str, doc_walk.Example]) -> str:
    return f"{pair[0]}:{pair[1].line}"


@pytest.mark.parametrize(("doc", "example"), ASKED, ids=[_example_id(pair) for pair in ASKED])
def test_each_shown_command_answers_what_is_shown(demo: Demo, doc: str, example: doc_walk.Example) -> None:
    """Every request of the tour and of docs/platforms.md, run as shown; its answer, where one is shown, compared
    field by field (doc_walk.mismatches)."""
    done = demo.run(example.command, timeout=60)
    assert done.returncode == 0, f"{doc}:{example.line}\n{done.stderr}"
    answered = json.loads(done.stdout)
    assert not (isinstance(answered, dict) and ({"error", "error_code"} & answered.keys())), answered
    if example.answer is None:
        return
    problems = doc_walk.mismatches(doc_walk.parse_shown(example.answer), answered)
    assert not problems, (f"{doc}:{example.answer_line} shows an answer the service does not give:\n  "
                          + "\n  ".join(problems) + "\nThe service answers:\n"
                          + json.dumps(answered, ensure_ascii=False, indent=1))


def test_the_walks_show_what_this_test_runs() -> None:
    """The walk-throughs are where this module looks: the tour has its steps' commands and three answered
    requests, docs/platforms.md its registration and four requests, each SparkTide/AgentArts/Dify one answered."""
    assert [e.command.split()[0:2] for e in TOUR if _is_setup(e)] == [
        ["make", "install"], ["export", "PROJECT_CALLBACK_KEY=demo-callback-secret"],
        ["export", 'OPENSEARCH_URL="$(scripts/opensearch-local'], ["es-provider", "kb"], ["es-provider", "ingest"],
        ["es-provider", "ingest"], ["es-provider", "serve"]]
    assert sum(e.answer is not None for e in TOUR) == 3
    assert sum(e.answer is not None for e in WALKS["docs/platforms.md"]) == 5


def test_step_2_names_the_index_and_alias_it_makes(demo: Demo, opensearch: Any) -> None:
    shown = re.search(r"the index `([^`]+)` from `mappings/`, and its alias `([^`]+)`", README)
    assert shown is not None, "README step 2 names the index and its alias"
    index, alias = shown.groups()
    assert f'alias = "{alias}"' in (ROOT / "examples" / "config.toml").read_text(encoding="utf-8")
    assert index == f"{alias}-v1"
    with urllib.request.urlopen(f"{opensearch.url}/_alias/{demo.alias}", timeout=10) as response:
        aliased = json.loads(response.read())
    assert list(aliased) == [f"{demo.alias}-v1"] and list(aliased[f"{demo.alias}-v1"]["aliases"]) == [demo.alias]


def test_step_3_ingests_the_corpus_the_readme_describes(demo: Demo) -> None:
    corpus_line, folder_line = (e.line for e in TOUR if e.command.startswith("es-provider ingest"))
    shown = re.search(r"`examples/sample-corpus.jsonl` \((\d+) short", README)
    assert shown is not None
    assert f"ingested {shown.group(1)} documents" in demo.outputs[corpus_line], demo.outputs[corpus_line]
    assert "ingested 1 documents" in demo.outputs[folder_line], demo.outputs[folder_line]


def test_step_6_workbench_with_the_shown_key(demo: Demo) -> None:
    shown = re.search(r"http://127\.0\.0\.1:8080/workbench \(key `([^`]+)`\)", README)
    assert shown is not None, "README step 6 names the workbench's URL and key"
    connection = http.client.HTTPConnection("127.0.0.1", demo.port, timeout=10)
    connection.request("GET", "/workbench")
    first = connection.getresponse()
    assert first.status == 401 and 'id="key"' in first.read().decode()
    connection.request("POST", "/workbench/login", body=f"key={shown.group(1)}",
                       headers={"Content-Type": "application/x-www-form-urlencoded", "Origin": demo.base})
    login = connection.getresponse()
    login.read()
    assert login.status == 303, login.status
    cookie = login.getheader("Set-Cookie", "").split(";", 1)[0]
    connection.request("GET", "/workbench", headers={"Cookie": cookie})
    page = connection.getresponse()
    page.read()
    assert page.status == 200
    connection.close()


def test_step_6_access_shows_who_was_served_the_document(demo: Demo) -> None:
    """After the tour's AgentArts request (which answers customer-faq), `es-provider access --document customer-faq`
    lists its record (records are written within a second or so)."""
    tour, _ = doc_walk.section(README, TOUR_HEADING)
    shown = re.findall(r"`(es-provider access [^`]+)`", tour)
    assert len(shown) == 1, shown
    document = re.search(r"--document (\S+)", shown[0])
    assert document is not None
    agentarts = next(e for e in TOUR if "/knowledge-bases/retrieve" in e.command)
    assert demo.run(agentarts.command).returncode == 0
    deadline = time.monotonic() + 30
    while True:
        done = demo.run(shown[0])
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        if records or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert records, "no access record for the document"
    assert all(document.group(1) in record["documents"] for record in records)


# `make run PORT=… OPENSEARCH_PORT=…` beside anything on 8080/9200: the printed curls follow the ports.


def _printed_curls(printed: str) -> list[str]:
    return re.findall(r"^curl -s .*?\"trustedContext\":\{\}\}'$", printed, re.MULTILINE | re.DOTALL)


def test_make_run_on_other_ports_prints_curls_for_them(opensearch: Any, tmp_path: Path) -> None:
    """`make run PORT=<free> OPENSEARCH_PORT=<the test node's>` (with the demo's configuration on an alias of its
    own: CONFIG): the engine already answering there is used, nothing is started; the curls it prints name the
    port and answer u-alice and u-bob with their own tenants' documents."""
    alias = f"test-docs-run-{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    env["CONFIG"] = str(_own_config(tmp_path, "run", alias))
    port = free_port()
    arguments = [f"PORT={port}"]
    found = re.fullmatch(r"http://127\.0\.0\.1:(\d+)", opensearch.url)
    if found is not None:
        arguments.append(f"OPENSEARCH_PORT={found.group(1)}")
    else:  # a node elsewhere (testcontainers, OPENSEARCH_URL): a node of your own
        env["OPENSEARCH_URL"] = opensearch.url
    log = tmp_path / "make-run.log"
    with log.open("w") as sink:
        process = subprocess.Popen(["make", "--no-print-directory", "run", *arguments], cwd=ROOT, env=env,
                                   stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for(f"{base}/healthz", process, log, seconds=180)
        printed = log.read_text()
        if found is not None:
            assert f"already answers on port {found.group(1)}: using it" in printed, printed
        curls = _printed_curls(printed)
        assert len(curls) == 2, printed
        assert f"{base}/workbench" in printed and ":8080" not in printed, printed
        tenants: dict[str, set[str | None]] = {}
        documents: dict[str, set[str]] = {}
        for curl in curls:
            assert curl.startswith(f"curl -s {base}/agent/knowledge/"), curl
            done = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=60)
            answer = json.loads(done.stdout)
            subject = re.search(r'"subjectId":"([^"]+)"', curl)
            assert subject is not None and answer["items"], answer
            tenants[subject.group(1)] = {item.get("tenantId") for item in answer["items"]}
            documents[subject.group(1)] = {item["documentId"] for item in answer["items"]}
        assert tenants["u-alice"] <= {"team-a", None} and "team-a" in tenants["u-alice"], tenants
        assert tenants["u-bob"] <= {"team-b", None} and "team-b" in tenants["u-bob"], tenants
        assert documents["u-alice"] != documents["u-bob"]
    finally:
        _stop(process)
        _drop(opensearch.url, alias)


def test_run_demo_refuses_a_taken_port_at_once_naming_the_way_around(tmp_path: Path) -> None:
    """Something on PORT (a listener that never answers), or on OPENSEARCH_PORT that is not an engine: refused
    before anything is started or written, naming the variable to move it."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        started = time.monotonic()
        done = subprocess.run([str(ROOT / "scripts" / "run-demo")], cwd=ROOT, env={**env, "PORT": busy},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and f"port {busy} is in use" in done.stderr and "PORT=" in done.stderr, done
        done = subprocess.run([str(ROOT / "scripts" / "run-demo")], cwd=ROOT, capture_output=True, text=True,
                              env={**env, "PORT": str(free_port()), "OPENSEARCH_PORT": busy}, timeout=60)
        assert done.returncode == 1 and "OPENSEARCH_PORT=" in done.stderr, done
        assert time.monotonic() - started < 30  # the node alone would take 30-60 s to start; measured ~6 s
