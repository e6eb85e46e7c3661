"""SPEC U2, issue 12 items 6 and 7: the web console says what to do, in a real browser (headless
Chromium driven by Playwright) against the running stack — a refused token is not "type your
token", and an environment line without `=` stops the submission instead of being dropped.

Skipped with the reason where Chromium or Playwright is missing (test_e2e_console.py says how).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from e2e_support import Stack

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from playwright.async_api import Page, async_playwright, expect
except ImportError:  # pragma: no cover - the dev extra installs it
    pytest.skip("playwright is not installed (pip install -e .[dev])", allow_module_level=True)
if CHROMIUM is None:
    if os.environ.get("JPU_TEST_BROWSER_REQUIRED") == "1":
        raise RuntimeError("JPU_TEST_BROWSER_REQUIRED=1 but no chromium on PATH")
    pytest.skip("no chromium on PATH (run scripts/install-browser)", allow_module_level=True)


@pytest_asyncio.fixture(scope="module")
async def page(stack: Stack) -> AsyncIterator[Page]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page
            assert errors == [], errors  # no JavaScript error on any view
        finally:
            await browser.close()


async def _token(page: Page, stack: Stack, token: str) -> None:
    await page.goto(stack.url + "/")
    await page.evaluate("localStorage.setItem('jpu.lang', 'en')")
    await page.fill("#token-input", token)
    await page.press("#token-input", "Enter")


async def test_U2_a_refused_token_says_it_was_not_accepted_and_what_to_do(
    stack: Stack, page: Page
) -> None:
    await _token(page, stack, "demo-nobody-at-all")
    error = page.locator("#error")
    await expect(error).to_contain_text("This API token was not accepted")
    await expect(error).to_contain_text("jpu-admin token create USER")
    await page.click("#lang-toggle")
    await expect(error).to_contain_text("이 API 토큰은 받아들여지지 않았습니다")
    await page.click("#lang-toggle")
    await page.evaluate("localStorage.removeItem('jpu.token')")
    await page.goto(stack.url + "/#/queue")
    await page.reload()
    await expect(error).to_contain_text("Type your API token")  # none yet: the first step
    if artifacts := os.environ.get("JPU_TEST_ARTIFACTS"):
        await page.screenshot(path=os.path.join(artifacts, "console-no-token.png"))


async def test_U2_an_env_line_without_equals_is_an_error_and_nothing_is_submitted(
    stack: Stack, page: Page
) -> None:
    erin = stack.api("osl-erin")
    before = len(erin.get("/v1/jobs", limit=500)["jobs"])
    await _token(page, stack, "demo-osl-erin")
    await expect(page.locator("#whoami")).to_contain_text("osl-erin")
    await page.goto(f"{stack.url}/#/submit")
    await page.reload()
    await page.fill("input[name=name]", "env-check")
    await page.fill("input[name=num_gpus]", "1")
    await page.fill("textarea[name=command]", "echo $SEED")
    await page.fill("textarea[name=env]", "SEED=7\nNOEQUALS")
    await page.click("#submit-form button[type=submit]")
    error = page.locator("#error")
    await expect(error).to_contain_text('Environment line 2 ("NOEQUALS") has no "="')
    await expect(page.locator("#submit-result")).to_be_empty()
    assert len(erin.get("/v1/jobs", limit=500)["jobs"]) == before  # nothing was submitted

    await page.fill("textarea[name=env]", "SEED=7")  # corrected: submitted, the error gone
    await page.click("#submit-form button[type=submit]")
    await expect(page.locator("#submit-result a")).to_be_visible()
    await expect(error).to_be_hidden()
    job_id = (await page.locator("#submit-result a").text_content() or "").strip()
    assert erin.wait(job_id, ["COMPLETED"], timeout=30)["env"] == {"SEED": "7"}


async def test_U2_job_page_tells_the_oom_retry_in_a_sentence(stack: Stack, page: Page) -> None:
    erin = stack.api("osl-erin")
    oom = 'echo "torch.OutOfMemoryError: CUDA out of memory" >&2\nexit 1\n'
    job = erin.submit(oom, tiers=["rtx4090"], name="oom-page")  # the biggest GPU there is
    done = erin.wait(job["id"], lambda j: j["state"] == "FAILED" and j["reason"] == "OOM")
    assert done["oom_explanation"] == [
        "attempt 1 ran out of GPU memory on rtx4090 (24 GB); no GPU with more than 24 GB exists "
        "here, so the job failed"
    ]
    await _token(page, stack, "demo-osl-erin")
    await page.goto(f"{stack.url}/#/job/{job['id']}")
    await page.reload()
    fields = page.locator("#job-fields")
    await expect(fields).to_contain_text("OOM retry")
    await expect(fields).to_contain_text("no GPU with more than 24 GB exists here")
