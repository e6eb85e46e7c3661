"""SPEC U4 in the web console: the job page's "Why it waited" (GET /v1/jobs/{id}/wait in
sentences, why.js) on SPEC R3's worked example, on the running platform in a real browser,
English and Korean. The example as tests/e2e/test_e2e_demotion.py drives it (scaled to seconds).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator

import pytest_asyncio
from playwright.async_api import Page, async_playwright, expect

from jpu.testing.e2e_stack import (
    KDG_START,
    R3_STACK_CONFIG,
    R3_STACK_ENV,
    Stack,
    chromium_or_skip,
    wait_until,
)

STACK_ENV, STACK_CONFIG = R3_STACK_ENV, R3_STACK_CONFIG  # read by conftest's `stack`
CHROMIUM = chromium_or_skip()  # Playwright is a dev dependency: its absence fails the import


@pytest_asyncio.fixture
async def page() -> AsyncIterator[Page]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            p = await browser.new_page(viewport={"width": 1280, "height": 900})
            p.set_default_timeout(15_000)
            errors: list[str] = []
            p.on("pageerror", lambda e: errors.append(str(e)))
            yield p
            assert errors == [], errors  # no JavaScript error
        finally:
            await browser.close()


def _demote_x(stack: Stack) -> tuple[str, str, str]:
    alice, bob, carol, erin = (
        stack.api(u) for u in ("bcg-alice", "bcg-bob", "kdg-carol", "osl-erin")
    )
    wait_until(lambda: alice.lab("KDG")["raw_value"] == KDG_START, 15, lambda: "starting usage")
    y = bob.submit(stack.hold("y"), name="Y")["id"]
    bob.wait(y, ["RUNNING"])
    h = erin.submit(stack.hold("h"), name="H")["id"]
    erin.wait(h, ["RUNNING"])
    x = alice.submit("sleep 1", num_gpus=2, name="X")["id"]
    alice.wait(x, ["RESERVING"])
    k = carol.submit("sleep 1", num_gpus=2, name="K")["id"]
    carol.wait(k, lambda j: j["state"] == "GLOBAL_QUEUE_WAIT" and j["rank"] == 2, what="K rank 2")
    time.sleep(max(0.0, 1.5 - (time.time() - bob.job(y)["started_at"])))
    stack.release("y")
    alice.wait(x, lambda j: j["reservation"] is None and j["usage_charged"] > 0, what="X demoted")
    return x, y, k


async def test_U4_console_job_page_explains_the_wait_and_the_demotion(
    stack: Stack, page: Page
) -> None:
    x, y, k = _demote_x(stack)
    await page.goto(stack.url + "/")
    await page.fill("#token-input", "demo-bcg-alice")
    await page.press("#token-input", "Enter")
    await page.goto(f"{stack.url}/#/job/{x}")
    await page.reload()
    if await page.locator("#lang-toggle").text_content() == "English":
        await page.click("#lang-toggle")
    await expect(page.locator("#job-title")).to_have_text(x)
    await expect(page.locator("#job-why")).to_be_empty()  # loaded on request, not every poll
    await page.click("#job-why-load")
    demoted = page.locator("#job-why .why-demoted")
    await expect(demoted).to_contain_text(f"job {y} (BCG) ended, freeing GPU")
    await expect(demoted).to_contain_text("charging BCG")
    await expect(demoted).to_contain_text(f"then KDG's job {k}")
    await expect(page.locator("#job-why .why-reservation")).to_contain_text(
        "demoted, it was no longer rank 1"  # the catalog's one sentence, as `jpu why` says
    )
    step = page.locator("#job-why .why-steps li[data-rank='2']").first
    await expect(step).to_contain_text("RESERVING, rank 2 of")  # the state's code, as the page
    story = await page.locator("#job-why").text_content() or ""
    assert "state." not in story and "why." not in story
    # S1: alice had a free slot, so X never waited for one; no "because" is an event's type
    assert "bcg-alice had a free slot" in story and "promoted at once" in story, story
    assert "slots are held" not in story
    for name in ("JobDispatched", "JobPromoted", "JobEnded", "MaintenanceChanged"):
        assert name not in story, name
    await page.click("#lang-toggle")  # Korean, redrawn without asking the API again
    await expect(page.locator("h3", has_text="대기 이유")).to_be_visible()
    await expect(demoted).to_contain_text(f"1위: KDG 연구실의 작업 {k}")
    await expect(page.locator("#job-why .why-phases")).to_contain_text("단계별 시간")
    await expect(step).to_contain_text("GPU 예약 중")  # the console's own Korean state name
    await page.click("#lang-toggle")
    if artifacts := os.environ.get("JPU_TEST_ARTIFACTS"):
        await page.screenshot(path=os.path.join(artifacts, "console-why.png"), full_page=True)
