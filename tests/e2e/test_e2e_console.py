"""SPEC U2, M5: the web console in a real browser (headless Chromium driven by Playwright) against
the running stack: token, queue with ranks and pending reasons, the GPU pool, lab usage chart, a
job page with its event timeline, the submit form, Korean/English, and the maintenance banner.

Chromium is a Debian package (`scripts/install-browser`; CI installs it). Elsewhere the module is
skipped with the reason, unless JPU_TEST_BROWSER_REQUIRED=1 makes that a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from e2e_support import Stack, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _browser_missing() -> str | None:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e .[dev])"
    return None if CHROMIUM else "no chromium on PATH (run scripts/install-browser)"


if (_why := _browser_missing()) is not None:
    if os.environ.get("JPU_TEST_BROWSER_REQUIRED") == "1":
        raise RuntimeError(f"JPU_TEST_BROWSER_REQUIRED=1 but {_why}")
    pytest.skip(_why, allow_module_level=True)

from playwright.async_api import Page, async_playwright, expect  # noqa: E402


@pytest_asyncio.fixture(scope="module")
async def browser_page(stack: Stack) -> AsyncIterator[Page]:
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


async def _login(page: Page, stack: Stack, user: str) -> None:
    await page.goto(stack.url + "/")
    await page.fill("#token-input", f"demo-{user}")
    await page.press("#token-input", "Enter")
    await expect(page.locator("#whoami")).to_contain_text(user)


async def _go(page: Page, stack: Stack, view: str) -> None:
    await page.goto(f"{stack.url}/#/{view}")
    await page.reload()  # a fresh render of the view, not the 5 s refresh


async def test_U2_console_needs_a_token_then_shows_who_is_signed_in(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    await page.goto(stack.url + "/")
    await page.evaluate("localStorage.clear()")
    await page.reload()
    await expect(page.locator("#error")).to_contain_text("API token")
    await _login(page, stack, "osl-erin")
    await expect(page.locator("#whoami")).to_have_text("osl-erin (OSL, user)")


async def test_U2_submit_form_then_job_page_with_event_timeline(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "submit")
    await page.fill("input[name=name]", "from-console")
    await page.fill("input[name=num_gpus]", "1")
    await page.fill("input[name=tiers]", "rtx4090")
    await page.fill("textarea[name=command]", 'echo "attempt $JOB_ATTEMPT"')
    await page.fill("textarea[name=env]", "SEED=7")
    await page.click("#submit-form button[type=submit]")
    link = page.locator("#submit-result a")
    await expect(link).to_be_visible()
    job_id = (await link.text_content() or "").strip()
    job = stack.api("osl-erin").wait(job_id, ["COMPLETED"], timeout=30)
    assert job["name"] == "from-console" and job["tiers"] == ["rtx4090"]
    await link.click()
    await page.reload()
    await expect(page.locator("#job-title")).to_have_text(job_id)
    await expect(page.locator("#job-fields")).to_contain_text("COMPLETED")
    timeline = page.locator("#job-events li strong")
    await expect(timeline.first).to_have_text("JobSubmitted")
    await expect(timeline.last).to_have_text("JobEnded")
    await expect(page.locator("#job-cancel")).to_be_hidden()  # nothing to cancel any more


async def test_U2_queue_shows_rank_and_pending_reason_and_pool_shows_running_jobs(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    frank = stack.api("osl-frank")
    # the 8 GPUs of the default cluster busy with 2-GPU jobs, so a fifth one has to wait
    busy = [frank.submit(stack.hold(f"busy{i}"), 2)["id"] for i in range(3)]
    busy.append(stack.api("kdg-dave").submit(stack.hold("busy3"), 2)["id"])
    for job_id in busy:
        stack.api("admin").wait(job_id, ["RUNNING"], timeout=30)
    waiting = stack.api("kdg-dave").submit(stack.hold("late"), 2)["id"]
    stack.api("kdg-dave").wait(waiting, lambda j: j.get("rank") == 1, timeout=20)

    await _login(page, stack, "kdg-dave")
    await _go(page, stack, "queue")
    row = page.locator("#queue-rows tr", has_text=waiting)
    await expect(row).to_contain_text("GLOBAL_QUEUE_WAIT")
    cells: list[Any] = await row.locator("td").all_text_contents()
    assert cells[0].strip() == "1" and cells[-1].strip() in ("Resources", "Reservation"), cells

    await _go(page, stack, "pool")
    cards = page.locator("#pool-cards")
    for job_id in busy[-1:]:  # dave's own running job is linked from its placement
        await expect(cards.locator(f"a[href='#/job/{job_id}']")).to_be_visible()
    await expect(cards.locator(".gpu.job")).to_have_count(8)


async def test_U2_lab_usage_chart_after_a_charge(stack: Stack, browser_page: Page) -> None:
    page = browser_page
    erin = stack.api("osl-erin")
    erin.wait(erin.submit("sleep 1")["id"], ["COMPLETED"], timeout=30)
    wait_until(lambda: erin.lab("OSL")["usage"] > 0, 20, "OSL usage charged")
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "labs")
    await expect(page.locator("#usage-chart svg polyline").first).to_be_visible()
    await expect(page.locator("#lab-rows")).to_contain_text("OSL")


async def test_U2_korean_and_english(stack: Stack, browser_page: Page) -> None:
    page = browser_page
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "queue")
    toggle = page.locator("#lang-toggle")
    if await toggle.text_content() == "English":  # start from English whatever was saved
        await toggle.click()
    await expect(page.locator("nav a[href='#/queue']")).to_have_text("Queue")
    await toggle.click()
    await expect(page.locator("nav a[href='#/queue']")).to_have_text("대기열")
    await expect(page.locator("html")).to_have_attribute("lang", "ko")
    await toggle.click()
    await expect(page.locator("nav a[href='#/queue']")).to_have_text("Queue")


async def test_M5_banner_in_every_state_but_normal(stack: Stack, browser_page: Page) -> None:
    page = browser_page
    admin = stack.api("admin")
    await page.goto(stack.url + "/")
    banner = page.locator("#maintenance-banner")
    await expect(banner).to_be_hidden()
    r = admin.http.post("/v1/admin/maintenance", json={"action": "start", "message": "NFS work"})
    assert r.status_code in (200, 202), r.text
    try:
        await page.reload()
        await expect(banner).to_be_visible()
        await expect(page.locator("#maintenance-message")).to_contain_text("NFS work")
        state = (await page.locator("#maintenance-state").text_content() or "").strip()
        assert state in ("DRAINING", "BACKFILL_RECOVERY", "ACTIVE"), state
    finally:
        r = admin.http.post("/v1/admin/maintenance", json={"action": "end"})
        assert r.status_code in (200, 202), r.text
    wait_until(
        lambda: admin.get("/v1/maintenance/status")["state"] == "NORMAL", 20, "maintenance end"
    )
    await page.reload()
    await expect(banner).to_be_hidden()


async def test_U5_job_page_log_pane_shows_the_attempts_output_and_refreshes_while_it_runs(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    erin = stack.api("osl-erin")
    script = 'echo "line one"\necho "err one" >&2\n' + stack.hold("log-pane", 'echo "line two"')
    job = erin.submit(script, name="log-pane")
    erin.wait(job["id"], ["RUNNING"], timeout=30)
    await _login(page, stack, "osl-erin")
    toggle = page.locator("#lang-toggle")
    if await toggle.text_content() == "English":  # start from English whatever was saved
        await toggle.click()
    await _go(page, stack, f"job/{job['id']}")
    log, status = page.locator("#job-log"), page.locator("#job-log-status")
    await expect(log).to_contain_text("line one")
    await expect(status).to_contain_text("Updating while the attempt runs")
    await expect(page.locator("#job-log-attempt")).to_have_value("1")
    stack.release("log-pane")  # the job writes more and ends: the pane follows, no reload
    await expect(log).to_contain_text("line two")
    await expect(status).to_contain_text("The attempt has ended")
    await page.check("input[name=job-log-stream][value=stderr]")
    await expect(log).to_have_text("err one\n")
    await page.check("input[name=job-log-stream][value=stdout]")
    await expect(log).to_have_text("line one\nline two\n")
    await toggle.click()  # Korean labels like the rest of the console
    await expect(page.locator("#view-job h3[data-i18n='job.output']")).to_have_text("출력")
    await expect(status).to_contain_text("이 시도는 끝났습니다")
    await toggle.click()
    if artifacts := os.environ.get("JPU_TEST_ARTIFACTS"):  # CI keeps them: what a user saw
        await page.screenshot(path=os.path.join(artifacts, "console-log-pane.png"), full_page=True)


async def test_U5_log_pane_says_when_an_attempt_has_no_output_yet(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    frank = stack.api("osl-frank")
    # all 8 GPUs of the default cluster busy, so the next job waits without any output
    busy = [frank.submit(stack.hold(f"np{i}"), 2, name="np")["id"] for i in range(3)]
    busy.append(stack.api("osl-erin").submit(stack.hold("np3"), 2, name="np")["id"])
    for job_id in busy:
        stack.api("admin").wait(job_id, ["RUNNING"], timeout=30)
    waiting = stack.api("osl-erin").submit("echo later", 2, name="np-wait")["id"]
    stack.api("osl-erin").wait(waiting, lambda j: j.get("pending_reason") == "Resources")
    await _login(page, stack, "osl-erin")
    await _go(page, stack, f"job/{waiting}")
    await expect(page.locator("#job-log-status")).to_contain_text("No output yet")
    await expect(page.locator("#job-log")).to_be_empty()
