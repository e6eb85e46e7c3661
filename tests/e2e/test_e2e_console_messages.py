"""SPEC U2: the web console says what to do, in a real browser (headless
Chromium driven by Playwright) against the running stack — a refused token is not "type your
token", an environment line without `=` stops the submission instead of being dropped, the time
limit is read like `jpu submit --time` (SPEC U1) and a bad one refused, and in the Korean console
API errors (SPEC §8 codes) and job states are Korean, the server's own message beneath.

Skipped with the reason where Chromium or Playwright is missing (test_e2e_console.py says how).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest_asyncio
from playwright.async_api import Page, async_playwright, expect

from jpu.testing.e2e_stack import Stack, chromium_or_skip

CHROMIUM = chromium_or_skip()  # Playwright is a dev dependency: its absence fails the import


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
    # FAILED with reason OOM shows at the attempt's end, the dispatcher's decision (X8:
    # JobRetryDeclined, no bigger GPU) with its next cycle, ~0.1 s later: wait for the decision
    done = erin.wait(
        job["id"],
        lambda j: (j["attempts"][-1]["retry"] or {}).get("decision") not in (None, "pending"),
        what="the OOM retry decided",
    )
    assert done["state"] == "FAILED" and done["reason"] == "OOM", done
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


OOM_ON_FIRST_ATTEMPT = """if [ "$JOB_ATTEMPT" = 1 ]; then
  echo "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2
  exit 1
fi
"""


async def test_X8_U2_the_oom_timeline_names_the_attempt_that_ran_out_of_memory(
    stack: Stack, page: Page
) -> None:
    """X8: attempt 1 runs out of memory on an rtx3080ti (the rtx4090s are busy) and the job
    goes back to the queue as attempt 2; the timeline's sentence names attempt 1, the one that
    ran out, and the retry as attempt 2."""
    carol, dave, bob = stack.api("kdg-carol"), stack.api("kdg-dave"), stack.api("bcg-bob")
    hold = stack.hold("x8-console")
    busy = [u.submit(hold, tiers=["rtx4090"], name="busy") for u in (carol, carol, carol, dave)]
    try:
        for b in busy:
            who = carol if b["user"] == "kdg-carol" else dave
            assert who.wait(b["id"], ["RUNNING"])["placement"]["tier"] == "rtx4090"
        job = bob.submit(OOM_ON_FIRST_ATTEMPT, tiers=["rtx4090", "rtx3080ti"], name="x8-page")
        bob.wait(job["id"], lambda j: j["attempt"] == 2, what="attempt 2 scheduled")
        scheduled = [e for e in bob.events(job["id"]) if e["type"] == "JobRetryScheduled"]
        assert [e["attempt"] for e in scheduled] == [2], scheduled  # the event opens attempt 2
        await _token(page, stack, "demo-bcg-bob")
        await page.goto(f"{stack.url}/#/job/{job['id']}")
        await page.reload()
        events = page.locator("#job-events")
        await expect(events).to_contain_text(
            "Attempt 1 ran out of GPU memory: back to the queue, to retry as attempt 2"
        )
        await expect(events).not_to_contain_text("Attempt 2 ran out of GPU memory")
    finally:
        stack.release("x8-console")
    assert bob.wait(job["id"], ["COMPLETED", "FAILED", "CANCELLED"], timeout=60)["attempt"] == 2


async def test_U2_the_time_limit_takes_slurm_format_and_refuses_anything_else(
    stack: Stack, page: Page
) -> None:
    erin = stack.api("osl-erin")
    before = len(erin.get("/v1/jobs", limit=500)["jobs"])
    await _token(page, stack, "demo-osl-erin")
    await expect(page.locator("#whoami")).to_contain_text("osl-erin")
    await page.goto(f"{stack.url}/#/submit")
    await page.reload()
    limit, hint = page.locator("input[name=time_limit]"), page.locator("#time-hint")
    # the rules of `jpu submit --time` (sbatch): minutes, M:S, H:M:S, D-H[:M[:S]]
    for text, shown in (
        ("90", "= 1 h 30 min (01:30:00)"),
        ("1:30:00", "= 1 h 30 min (01:30:00)"),
        ("2-00:00:00", "= 2 d (2-00:00:00)"),
        ("5:30", "= 5 min 30 s (00:05:30)"),
        ("1-12", "= 1 d 12 h (1-12:00:00)"),
        ("UNLIMITED", "= no time limit"),
    ):
        await limit.fill(text)
        await expect(hint).to_have_text(shown)
    await page.fill("input[name=name]", "time-check")
    await page.fill("textarea[name=command]", "echo timed")
    await limit.fill("abc")
    await expect(limit).to_have_attribute("aria-invalid", "true")
    await page.click("#submit-form button[type=submit]")
    error = page.locator("#error")
    await expect(error).to_contain_text('Time limit "abc" is not a time')
    await expect(error).to_contain_text("D-HH[:MM[:SS]]")
    await expect(page.locator("#submit-result")).to_be_empty()
    await limit.fill("0")
    await page.click("#submit-form button[type=submit]")
    await expect(error).to_contain_text('Time limit "0" must be positive')
    await page.click("#lang-toggle")  # the same refusal in Korean
    await expect(error).to_contain_text('시간 제한 "0"은(는) 0보다 커야 합니다')
    await page.click("#lang-toggle")
    assert len(erin.get("/v1/jobs", limit=500)["jobs"]) == before  # nothing was submitted

    await limit.fill("1:30:00")
    await page.click("#submit-form button[type=submit]")
    link = page.locator("#submit-result a")
    await expect(link).to_be_visible()
    await expect(error).to_be_hidden()
    job_id = (await link.text_content() or "").strip()
    assert erin.wait(job_id, ["COMPLETED"], timeout=30)["time_limit_s"] == 5400


async def test_U2_api_errors_and_states_are_korean_in_the_korean_console(
    stack: Stack, page: Page
) -> None:
    erin = stack.api("osl-erin")
    await _token(page, stack, "demo-osl-erin")
    await expect(page.locator("#whoami")).to_contain_text("osl-erin")
    await page.evaluate("localStorage.setItem('jpu.lang', 'ko')")
    try:
        await page.goto(f"{stack.url}/#/submit")
        await page.reload()
        await expect(page.locator("html")).to_have_attribute("lang", "ko")
        await page.fill("input[name=name]", "too-big")
        await page.fill("input[name=num_gpus]", "4")  # the largest placement has 2 GPUs
        await page.fill("textarea[name=command]", "echo big")
        await page.click("#submit-form button[type=submit]")
        error = page.locator("#error")
        await expect(error.locator(".err-head")).to_contain_text(
            "이 클러스터의 어떤 배치(placement)로도 요청한 대로 실행할 수 없습니다"
        )
        await expect(error.locator(".err-code")).to_have_text("422 NO_FIT_PLACEMENT")
        # beneath: the server's own message, then the fix from its details, in Korean
        await expect(error.locator(".err-server")).to_contain_text("no placement")
        await expect(error.locator(".err-fix")).to_contain_text("가장 큰 배치는 GPU 2개입니다")
        await expect(error.locator(".err-fix")).to_contain_text("2개 이하로 요청하세요")
        if artifacts := os.environ.get("JPU_TEST_ARTIFACTS"):
            await page.screenshot(path=os.path.join(artifacts, "console-error-ko.png"))
        await page.click("#lang-toggle")  # the same error in English, no new request
        await expect(error.locator(".err-head")).to_contain_text(
            "No placement of this cluster can run this job as asked"
        )
        await expect(error.locator(".err-fix")).to_contain_text(
            "The largest placement that can run it has 2 GPUs"
        )
        await page.click("#lang-toggle")

        await page.goto(f"{stack.url}/#/job/no-such-job")
        await page.reload()
        await expect(error.locator(".err-head")).to_contain_text("찾을 수 없습니다")
        await expect(error.locator(".err-code")).to_have_text("404 NOT_FOUND")
        await expect(error.locator(".err-server")).to_contain_text("no-such-job")
        await expect(page.locator("#job-body")).to_be_hidden()

        job_id = erin.submit("echo ko", name="ko-state")["id"]
        erin.wait(job_id, ["COMPLETED"], timeout=30)
        await page.goto(f"{stack.url}/#/job/{job_id}")
        await page.reload()
        state = page.locator("#job-fields dd[data-field=state] .code")
        await expect(state).to_have_text("완료")  # the state in Korean, its code in the tooltip
        assert (await state.get_attribute("title") or "").startswith("COMPLETED")
        ended = page.locator("#job-events li[data-type=JobEnded] .sentence")
        await expect(ended).to_contain_text("시도 1 종료: 완료, 종료 코드 0")
        await expect(page.locator("#job-events li").first.locator(".sentence")).to_contain_text(
            "osl-erin (OSL)이(가)"
        )
    finally:
        await page.evaluate("localStorage.setItem('jpu.lang', 'en')")
