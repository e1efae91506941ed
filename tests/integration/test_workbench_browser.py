"""The workbench in a real browser (Debian's headless Chromium, driven by Playwright with the installed binary), on
the demo `make run` starts (scripts/run-demo, its own alias on the test node): the printed URL, a login with the
demo key, u-alice and u-bob seeing different documents, "why not?" for a document Alice cannot read, and the
page refusing without the key. With ES_PROVIDER_SCREENSHOTS=<folder> the screenshots are kept (docs/img)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import oracle
from helpers.served import free_port
from helpers.setup import PRINCIPALS, SAMPLE_CORPUS
from playwright.async_api import Browser, Page, async_playwright

ROOT = Path(__file__).resolve().parent.parent.parent
DEMO_KEY = "demo-workbench-key"
PORT = free_port()  # beside anything on 8080 (a `make run` of one's own): run-demo serves on PORT
BASE = f"http://127.0.0.1:{PORT}"
DOCS = [json.loads(line) for line in SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines()]
QUERY = "设备安装位置"


def alice_cannot_read() -> list[dict[str, Any]]:
    return [d for d in DOCS if not oracle.visible(d, "u-alice", {"team-a"}, PRINCIPALS["u-alice"])]


@pytest.fixture(scope="module")
def demo(opensearch, tmp_path_factory) -> Iterator[str]:
    """scripts/run-demo (what `make run` runs) with the demo config on its own alias; yields what it printed."""
    folder = tmp_path_factory.mktemp("demo")
    alias = f"test-demo-{uuid.uuid4().hex}"
    config = folder / "config.toml"
    text = (ROOT / "examples" / "config.toml").read_text(encoding="utf-8")
    config.write_text(text.replace('alias = "kb-project-documents"', f'alias = "{alias}"'), encoding="utf-8")
    out = folder / "demo.out"
    env = {**os.environ, "OPENSEARCH_URL": opensearch.url, "CONFIG": str(config), "PORT": str(PORT)}
    with out.open("w") as sink:
        process = subprocess.Popen([str(ROOT / "scripts" / "run-demo")], cwd=ROOT, env=env, stdout=sink,
                                   stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while "es-provider serving on" not in out.read_text():
            assert process.poll() is None, out.read_text()[-3000:]
            assert time.monotonic() < deadline, out.read_text()[-3000:]
            time.sleep(0.3)
        yield out.read_text()
    finally:
        process.terminate()
        process.wait(timeout=30)
        urllib.request.urlopen(urllib.request.Request(f"{opensearch.url}/{alias}*", method="DELETE"))


@pytest.fixture(scope="module")
def chromium() -> str:
    found = subprocess.run([str(ROOT / "scripts" / "ensure-chromium")], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    return found.stdout.strip().splitlines()[-1]


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        yield launched
        await launched.close()


async def shot(page: Page, name: str) -> None:
    folder = os.environ.get("ES_PROVIDER_SCREENSHOTS")
    if folder:
        await page.screenshot(path=str(Path(folder) / name), full_page=True)


async def log_in(page: Page, key: str) -> int:
    first = await page.goto(f"{BASE}/workbench")
    assert first is not None and first.status == 401
    await page.fill("#key", key)
    async with page.expect_navigation():
        await page.click("#login")
    return await page.evaluate("() => document.getElementById('kb') ? 200 : 401")


async def ask_as(page: Page, subject: str, tenant: str) -> set[str]:
    await page.fill("#tenant", tenant)
    await page.fill("#subject", subject)
    await page.fill("#query", QUERY)
    await page.evaluate("() => document.getElementById('answers').replaceChildren()")
    await page.click("#search")
    await page.wait_for_selector("#answer-dify")
    await page.wait_for_selector(f"#identity:has-text('{subject}')")
    ids = await page.locator("#answer-sparktide .item .meta").all_text_contents()
    return {text.split(" · ")[0] for text in ids if " · " in text}


async def test_the_demo_prints_the_workbench_url(demo: str) -> None:
    assert f"{BASE}/workbench" in demo and DEMO_KEY in demo


async def test_log_in_ask_as_two_users_and_ask_why_not(demo: str, browser: Browser) -> None:
    page = await browser.new_page(viewport={"width": 1400, "height": 900})
    await page.goto(f"{BASE}/workbench")
    await shot(page, "workbench-login.png")
    assert await log_in(page, "not-the-key") == 401  # a wrong key: the login form again
    assert await log_in(page, DEMO_KEY) == 200
    await page.wait_for_selector("#kb option", state="attached")

    alice = await ask_as(page, "u-alice", "team-a")
    await page.wait_for_selector("#identity:has-text('eng')")  # the principal store's groups are shown
    await shot(page, "workbench-alice.png")
    bob = await ask_as(page, "u-bob", "team-b")
    assert alice and bob and alice != bob
    for subject, tenant, seen in (("u-alice", "team-a", alice), ("u-bob", "team-b", bob)):
        allowed = {d["document_id"] for d in DOCS if oracle.visible(d, subject, {tenant}, PRINCIPALS[subject])}
        assert seen <= allowed, subject

    hidden = next(d for d in alice_cannot_read() if d.get("tenant_id") == "team-a")  # same tenant: SUBJECT rule
    await page.fill("#tenant", "team-a")
    await page.fill("#subject", "u-alice")
    await page.fill("#document", hidden["document_id"])
    await page.click("#explain")
    await page.wait_for_selector("#reasons table")
    rules = set(await page.locator("#reasons td:nth-child(2)").all_text_contents())
    assert rules == {"subject"}
    detail = " ".join(await page.locator("#reasons td:nth-child(3)").all_text_contents())
    assert "[eng]" in detail and "u-alice" in detail
    await shot(page, "workbench-why-not.png")


async def test_the_page_refuses_without_the_key(demo: str, browser: Browser) -> None:
    page = await browser.new_page()
    response = await page.goto(f"{BASE}/workbench")
    assert response is not None and response.status == 401
    assert await page.locator("#kb").count() == 0 and await page.locator("#key").count() == 1
    status = await page.evaluate("""async () => (await fetch('/workbench/api/search', {method: 'POST',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify({knowledge_id: 'project-documents',
        query: 'x'})})).status""")
    assert status == 401
    script = await page.goto(f"{BASE}/workbench/workbench.js")
    assert script is not None and script.status == 401
    assert not re.search(r"demo-(callback|agentarts)", await page.content())
