"""SPEC U2, M5: the web console in a real browser (headless Chromium driven by Playwright) against
the running stack: token, queue with ranks and pending reasons, the GPU pool (lab colours, who uses
what), lab usage chart (its window), a job page with its event timeline (sentences, the raw event
behind a toggle) and its files pane (SPEC §8 files: a file the job wrote, downloaded), a
forbidden job never shown above another job's details, live updates without a reload (stopped
while the page is hidden), the submit form, Korean/English, and the maintenance banner.
Screenshots go to $JPU_TEST_ARTIFACTS when it is set (CI keeps them).

Chromium is a Debian package (`scripts/install-browser`; CI installs it). Elsewhere the module is
skipped with the reason, unless JPU_TEST_BROWSER_REQUIRED=1 makes that a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from playwright.async_api import Page, async_playwright, expect

from jpu.testing.cli import project_dir
from jpu.testing.e2e_stack import Stack, chromium_or_skip, wait_until

CHROMIUM = chromium_or_skip()  # Playwright is a dev dependency: its absence fails the import


@pytest_asyncio.fixture(scope="module")
async def browser_page(stack: Stack) -> AsyncIterator[Page]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            # the page's Content-Security-Policy (no inline script) is never broken on any view
            page.on(
                "console",
                lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
            )
            yield page
            assert errors == [], errors  # no JavaScript error, no CSP violation, on any view
        finally:
            await browser.close()


async def _login(page: Page, stack: Stack, user: str) -> None:
    await page.goto(stack.url + "/")
    await page.fill("#token-input", f"demo-{user}")
    await page.press("#token-input", "Enter")
    await expect(page.locator("#whoami")).to_contain_text(user)


async def _go(page: Page, stack: Stack, view: str) -> None:
    await page.goto(f"{stack.url}/#/{view}")
    await page.reload()  # a fresh render of the view, not the periodic refresh


async def _english(page: Page) -> None:
    """Start from English whatever an earlier test left saved."""
    if await page.locator("#lang-toggle").text_content() == "English":
        await page.click("#lang-toggle")
    await expect(page.locator("html")).to_have_attribute("lang", "en")


async def _shot(page: Page, name: str) -> None:
    if artifacts := os.environ.get("JPU_TEST_ARTIFACTS"):  # CI keeps them: what a user saw
        await page.screenshot(path=os.path.join(artifacts, name), full_page=True)


async def _no_horizontal_overflow(page: Page) -> None:
    widths = await page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], f"the page is wider than the window: {widths}"


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


async def _submit_form(page: Page, fields: dict[str, str]) -> str:
    """Fill these fields of the submit form, submit, and return the new job's id."""
    for name, value in fields.items():
        tag = "textarea" if name in ("command", "env") else "input"
        await page.fill(f"{tag}[name={name}]", value)
    await page.click("#submit-form button[type=submit]")
    link = page.locator("#submit-result a")
    await expect(link).to_be_visible()
    return (await link.text_content() or "").strip()


async def test_U2_submit_form_then_job_page_with_event_timeline(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "submit")
    await _english(page)
    long_name = "from-console-" + "x" * 115  # 128 characters without a break: must wrap
    await page.fill("input[name=name]", long_name)
    await page.fill("input[name=num_gpus]", "1")
    await page.fill("input[name=tiers]", "rtx4090")
    await page.fill("input[name=time_limit]", "1:30:00")  # sbatch --time, like `jpu submit`
    await expect(page.locator("#time-hint")).to_have_text("= 1 h 30 min (01:30:00)")
    await page.fill("textarea[name=command]", 'echo "attempt $JOB_ATTEMPT" # ' + "y" * 400)
    job_id = await _submit_form(page, {"env": "SEED=7"})
    link = page.locator("#submit-result a")
    job = stack.api("osl-erin").wait(job_id, ["COMPLETED"], timeout=30)
    assert job["name"] == long_name and job["tiers"] == ["rtx4090"]
    assert job["time_limit_s"] == 5400  # 1:30:00 = 1 h 30 min
    await link.click()
    await page.reload()
    await expect(page.locator("#job-title")).to_have_text(job_id)
    await expect(page.locator("#job-fields")).to_contain_text("COMPLETED")
    await expect(page.locator("#job-fields dd[data-field=time_limit_s]")).to_have_text("01:30:00")
    await expect(page.locator("#job-cancel")).to_be_hidden()  # nothing to cancel any more

    # the timeline: one sentence per event, with its local time and how long it took
    items = page.locator("#job-events li")
    await expect(items.last).to_have_attribute("data-type", "JobEnded")
    types = [await li.get_attribute("data-type") for li in await items.all()]
    events = stack.api("osl-erin").events(job_id)
    assert types == [e["type"] for e in events]
    sentences = [s.strip() for s in await items.locator(".sentence").all_text_contents()]
    assert sentences[0].startswith(f"Submitted by osl-erin (OSL) as “{long_name}”: 1 GPU")
    assert "tiers rtx4090, time limit 01:30:00" in sentences[0], sentences[0]
    dispatched = items.locator(".sentence", has_text="Attempt 1 dispatched to ")
    await expect(dispatched).to_contain_text("(rtx4090), GPU ")
    await expect(items.filter(has_text="Attempt 1 dispatched")).to_contain_text("in the queue")
    ended = sentences[types.index("JobEnded")]
    assert ended.startswith("Attempt 1 ended: COMPLETED, exit code 0"), ended
    await expect(items.filter(has_text="Attempt 1 ended").locator(".dur")).to_contain_text(
        "ran for"
    )
    for sentence in sentences:  # words, not JSON, not epoch seconds
        assert "{" not in sentence and '"type"' not in sentence, sentence
        assert not re.search(r"\b1[0-9]{9}\b", sentence), sentence
    for clock in await items.locator("time").all_text_contents():
        assert re.fullmatch(r"(\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}", clock), clock
    raw = items.first.locator("details.raw pre")
    await expect(raw).to_be_hidden()  # the raw event is one click away, not on the page
    await items.first.locator("details.raw summary").click()
    await expect(raw).to_be_visible()
    recorded = json.loads(await raw.text_content() or "")
    assert recorded["type"] == "JobSubmitted" and recorded["job_id"] == job_id
    await page.wait_for_timeout(3500)  # a live refresh must not close the open raw event
    await expect(raw).to_be_visible()
    await _no_horizontal_overflow(page)  # the long name and command wrap
    await _shot(page, "console-job-timeline.png")


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
    waiting = stack.api("kdg-dave").submit(stack.hold("late"), 2, name="late-sweep")["id"]
    stack.api("kdg-dave").wait(waiting, lambda j: j.get("rank") == 1, timeout=20)

    await _login(page, stack, "kdg-dave")
    await _go(page, stack, "queue")
    row = page.locator("#queue-rows tr", has_text=waiting)
    await expect(row).to_contain_text("GLOBAL_QUEUE_WAIT")
    cells: list[Any] = await row.locator("td").all_text_contents()
    assert cells[0].strip() == "1" and cells[-1].strip() in ("Resources", "Reservation"), cells
    assert cells[2].strip() == "late-sweep", cells  # the job's name, as squeue's NAME

    running = page.locator("#running-rows")  # who holds GPUs now, like squeue
    for job_id in busy:
        await expect(running.locator("tr", has_text=job_id)).to_contain_text("RUNNING")
    await expect(running.locator("tr", has_text=busy[-1])).to_contain_text("e2e")  # its name

    await _go(page, stack, "pool")
    cards = page.locator("#pool-cards")
    for job_id in busy[-1:]:  # dave's own running job is linked from its placement
        await expect(cards.locator(f"a[href='#/job/{job_id}']")).to_be_visible()
    await expect(cards.locator(".gpu.job")).to_have_count(8)
    # who uses what: each busy GPU carries its user and lab, filled with the lab's colour
    await expect(cards.locator(".gpu.job[data-lab=OSL][data-user=osl-frank]")).to_have_count(6)
    await expect(cards.locator(".gpu.job[data-lab=KDG][data-user=kdg-dave]")).to_have_count(2)
    await expect(cards.locator(".holder", has_text="osl-frank (OSL)")).to_have_count(3)
    await expect(cards.locator(".holder", has_text="kdg-dave (KDG)")).to_have_count(1)
    colour = "el => getComputedStyle(el).backgroundColor"
    osl = await cards.locator(".gpu.job[data-lab=OSL]").first.evaluate(colour)
    kdg = await cards.locator(".gpu.job[data-lab=KDG]").first.evaluate(colour)
    assert osl != kdg, (osl, kdg)
    legend = page.locator("#lab-legend")  # the legend: one swatch per lab, the same colours
    for lab in ("BCG", "KDG", "OSL"):
        await expect(legend.locator(f".lab-key[data-lab={lab}]")).to_be_visible()
    key = await legend.locator(".lab-key[data-lab=OSL] .swatch").evaluate(colour)
    assert key == osl, (key, osl)
    title = await cards.locator(".gpu.job[data-lab=KDG]").first.get_attribute("title") or ""
    assert "kdg-dave (KDG)" in title and busy[-1] in title, title
    await _shot(page, "console-pool.png")


async def test_U2_lab_usage_chart_after_a_charge(stack: Stack, browser_page: Page) -> None:
    page = browser_page
    erin = stack.api("osl-erin")
    erin.wait(erin.submit("sleep 1")["id"], ["COMPLETED"], timeout=30)
    wait_until(lambda: erin.lab("OSL")["usage"] > 0, 20, "OSL usage charged")
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "labs")
    await _english(page)
    await expect(page.locator("#usage-chart svg polyline").first).to_be_visible()
    await expect(page.locator("#lab-rows")).to_contain_text("OSL")


async def _chart_window(page: Page) -> tuple[int, float, list[str]]:
    svg = page.locator("#usage-chart svg")
    hours = int(await svg.get_attribute("data-hours") or 0)
    span = float(await svg.get_attribute("data-end") or 0) - float(
        await svg.get_attribute("data-start") or 0
    )
    return hours, span, await svg.locator("text.tick").all_text_contents()


async def test_U2_usage_chart_window_1h_24h_7d_30d_and_its_axis(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    erin = stack.api("osl-erin")
    erin.wait(erin.submit("sleep 1")["id"], ["COMPLETED"], timeout=30)
    wait_until(lambda: erin.lab("OSL")["usage"] > 0, 20, "OSL usage charged")
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "labs")
    await _english(page)
    buttons = page.locator("#chart-window button")
    await expect(buttons).to_have_text(["1 h", "24 h", "7 d", "30 d"])
    await expect(buttons.nth(1)).to_have_attribute("aria-pressed", "true")  # the default: a day
    svg = page.locator("#usage-chart svg")
    await expect(svg).to_have_attribute("data-hours", "24")
    hours, span, ticks = await _chart_window(page)
    assert hours == 24
    assert abs(span - 24 * 3600) < 5, span
    assert ticks and all(re.fullmatch(r"\d{2}:00", x) for x in ticks), ticks  # clock times
    await expect(svg.locator("polyline[data-lab=OSL]")).to_be_visible()
    # drawn at the size it is shown: the drawing fills the chart's whole width, not a middle part
    drawn = await svg.evaluate(
        "s => [s.viewBox.baseVal.width, s.viewBox.baseVal.height, s.clientWidth, s.clientHeight]"
    )
    assert abs(drawn[0] - drawn[2]) <= 2 and abs(drawn[1] - drawn[3]) <= 2, drawn

    async with page.expect_request(lambda r: "/v1/usage/history?hours=168" in r.url):
        await buttons.nth(2).click()
    await expect(svg).to_have_attribute("data-hours", "168")
    await expect(buttons.nth(2)).to_have_attribute("aria-pressed", "true")
    _, span, ticks = await _chart_window(page)
    assert abs(span - 7 * 86400) < 5, span
    assert 6 <= len(ticks) <= 8 and not any(":" in x for x in ticks), ticks  # one date a day
    await _shot(page, "console-usage-7d.png")

    await buttons.nth(3).click()
    await expect(svg).to_have_attribute("data-hours", "720")
    _, span, ticks = await _chart_window(page)
    assert abs(span - 30 * 86400) < 5, span
    assert 5 <= len(ticks) <= 7 and not any(":" in x for x in ticks), ticks  # every 5 days
    await page.wait_for_timeout(3500)  # the live refresh keeps the chosen window
    await expect(svg).to_have_attribute("data-hours", "720")
    # the last hour: what a job that just ended charged, a tick every 10 minutes (HH:MM)
    async with page.expect_request(lambda r: "/v1/usage/history?hours=1&" in r.url):
        await buttons.nth(0).click()
    await expect(svg).to_have_attribute("data-hours", "1")
    await expect(buttons.nth(0)).to_have_attribute("aria-pressed", "true")
    _, span, ticks = await _chart_window(page)
    assert abs(span - 3600) < 5, span
    assert 5 <= len(ticks) <= 7 and all(re.fullmatch(r"\d{2}:\d0", x) for x in ticks), ticks
    await expect(svg.locator("polyline[data-lab=OSL]")).to_be_visible()
    await buttons.nth(1).click()
    await expect(svg).to_have_attribute("data-hours", "24")


_CHART_FILL = """svg => {
  const box = svg.parentElement.parentElement.getBoundingClientRect();  // the view's section
  const shown = svg.getBoundingClientRect(), drawn = svg.getBBox();  // the drawing, in its units
  const scale = shown.width / svg.viewBox.baseVal.width;
  return [shown.width / box.width, (drawn.width * scale) / shown.width];
}"""


async def test_U2_usage_chart_uses_its_full_width_and_follows_a_resize(
    stack: Stack, browser_page: Page
) -> None:
    """The chart is as wide as its view (at least 95 %), its drawing spans the chart (not a
    middle part of it: its axis labels at the left edge to its x axis at the right), and a
    narrower window draws it again at the new width."""
    page = browser_page
    erin = stack.api("osl-erin")
    erin.wait(erin.submit("sleep 1")["id"], ["COMPLETED"], timeout=30)
    wait_until(lambda: erin.lab("OSL")["usage"] > 0, 20, "OSL usage charged")
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "labs")
    svg = page.locator("#usage-chart svg")
    await expect(svg.locator("polyline[data-lab=OSL]")).to_be_visible()
    try:
        for width in (1280, 760):
            await page.set_viewport_size({"width": width, "height": 900})
            await page.wait_for_function(
                """() => { const s = document.querySelector('#usage-chart svg');
                           return s && Math.abs(s.viewBox.baseVal.width - s.clientWidth) <= 2; }"""
            )
            chart, drawing = await svg.evaluate(_CHART_FILL)
            assert chart >= 0.95, (width, chart)
            assert drawing >= 0.9, (width, drawing)  # a fixed 800-wide drawing was 74 %
        await _no_horizontal_overflow(page)
    finally:
        await page.set_viewport_size({"width": 1280, "height": 900})


async def test_U2_a_state_name_is_one_line_in_the_queue_table(
    stack: Stack, browser_page: Page
) -> None:
    """At the usual width every state in the queue tables is on one line (its client rects
    share one top), never `PERSONAL_QUEU` / `E_WAIT`."""
    page = browser_page
    alice = stack.api("bcg-alice")
    held = alice.submit("true", name="one-line", hold=True)  # Q9: stays in the personal queue
    try:
        await _login(page, stack, "bcg-alice")
        await _english(page)
        await _go(page, stack, "queue")
        code = page.locator(f"#queue-rows tr:has-text('{held['id']}') .code[data-code]").first
        await expect(code).to_have_text("PERSONAL_QUEUE_WAIT")
        rects = await page.locator(
            "#queue-rows .code[data-code], #running-rows .code"
        ).evaluate_all(
            """els => els.map(e => { const rs = [...e.getClientRects()], tops = rs.map(r => r.top);
                 return [e.textContent, Math.max(...tops) - Math.min(...tops) < rs[0].height / 2,
                         tops]; })"""
        )  # a rect per piece between its <wbr>s: one line when they share a top
        assert rects and all(one_line for _, one_line, _ in rects), rects
    finally:
        assert alice.cancel(held["id"]).status_code == 202


async def test_U1_U2_the_form_reads_a_time_limit_by_the_cli_rule(
    stack: Stack, browser_page: Page
) -> None:
    """The console's form (time.js) and `jpu submit --time` follow one rule: the cases of
    tests/fixtures/time_limits.json, which the CLI's test runs too, run here in the page."""
    page = browser_page
    cases = json.loads((Path(__file__).parents[1] / "fixtures" / "time_limits.json").read_text())
    await page.goto(stack.url + "/")
    got = await page.evaluate(
        """async (cases) => {
             const { parseTimeLimit } = await import("/console/time.js");
             const read = (text) => {
               try { return parseTimeLimit(text); } catch (_) { return "refused"; }
             };
             return [cases.valid.map(([text]) => read(text)), cases.invalid.map(read)];
           }""",
        cases,
    )
    assert got[0] == [seconds for _, seconds in cases["valid"]], got[0]
    assert got[1] == ["refused"] * len(cases["invalid"]), got[1]


async def test_U2_queue_table_breaks_a_state_name_only_after_its_underscores(
    stack: Stack, browser_page: Page
) -> None:
    """In a narrow window the queue's state column wraps `PERSONAL_QUEUE_WAIT` at its
    underscores, never inside a word (`PERSONAL_QUEU` / `E_WAIT`)."""
    page = browser_page
    alice = stack.api("bcg-alice")
    held = alice.submit("true", name="narrow", hold=True)  # Q9: stays in the personal queue
    try:
        await page.set_viewport_size({"width": 640, "height": 900})
        await _login(page, stack, "bcg-alice")
        await _english(page)
        await _go(page, stack, "queue")
        code = page.locator(f"#queue-rows tr:has-text('{held['id']}') .code[data-code]").first
        await expect(code).to_have_text("PERSONAL_QUEUE_WAIT")
        # each piece between break opportunities lies on one line: no break inside a word
        lines = await code.evaluate(
            """el => [...el.childNodes].filter(n => n.nodeType === 3).map(n => {
                 const r = document.createRange(); r.selectNodeContents(n);
                 return [n.textContent, new Set([...r.getClientRects()].map(c => c.top)).size];
               })"""
        )
        assert [t for t, _ in lines] == ["PERSONAL_", "QUEUE_", "WAIT"], lines
        assert all(n == 1 for _, n in lines), lines
        await _no_horizontal_overflow(page)
        await _shot(page, "console-queue-narrow.png")
    finally:
        await page.set_viewport_size({"width": 1280, "height": 900})
        assert alice.cancel(held["id"]).status_code == 202


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


FILES_WRITER = """mkdir -p "$JOB_OUTPUT_DIR/results"
printf 'step,loss\\n1,0.5\\n2,0.25\\n' > "$JOB_OUTPUT_DIR/results/metrics.csv"
echo 'first report' > "$JOB_OUTPUT_DIR/report.txt"
ln -s /etc/shadow "$JOB_OUTPUT_DIR/shadow"
"""


async def test_files_job_page_lists_the_files_the_job_wrote_and_downloads_one(
    stack: Stack, browser_page: Page
) -> None:
    """SPEC §8 files: the pane lists what a running job wrote into its JOB_OUTPUT_DIR (and what
    it writes later), opens a directory, and a click downloads a file with the user's token; a
    link the job planted is shown, never followed."""
    page = browser_page
    erin = stack.api("osl-erin")
    later = 'echo "written later" > "$JOB_OUTPUT_DIR/later.txt"'
    job = erin.submit(FILES_WRITER + stack.hold("files-pane", later), name="files-pane")
    erin.wait(job["id"], ["RUNNING"], timeout=30)
    await _login(page, stack, "osl-erin")
    await _english(page)
    await _go(page, stack, f"job/{job['id']}")

    rows = page.locator("#job-files-rows")
    await expect(page.locator("#view-job h3[data-i18n='job.files']")).to_have_text("Files")
    await expect(rows.locator("a[data-file='report.txt']")).to_have_text("report.txt")
    await expect(rows.locator("a[data-dir='results']")).to_have_text("results/")
    shadow = rows.locator("tr", has_text="shadow")
    await expect(shadow).to_contain_text("symbolic link, never followed")
    assert await shadow.locator("a").count() == 0  # no download link to follow it
    report = rows.locator("tr", has_text="report.txt")
    await expect(report.locator("td.num")).to_have_text("13")  # its size in bytes

    # a file the running job writes later appears on a poll, without a reload
    stack.release("files-pane")
    await expect(rows.locator("a[data-file='later.txt']")).to_be_visible()
    erin.wait(job["id"], ["COMPLETED"], timeout=30)

    # a click downloads it with the user's token (a plain link could not send it)
    async with page.expect_download() as info:
        await rows.locator("a[data-file='report.txt']").click()
    download = await info.value
    assert download.suggested_filename == "report.txt"
    assert Path(await download.path()).read_bytes() == b"first report\n"

    # into a directory and back up
    await rows.locator("a[data-dir='results']").click()
    await expect(page.locator("#job-files-path")).to_have_text("/results")
    async with page.expect_download() as info:
        await rows.locator("a[data-file='results/metrics.csv']").click()
    data = Path(await (await info.value).path()).read_bytes()
    assert data == b"step,loss\n1,0.5\n2,0.25\n"
    await page.click("#job-files-up")
    await expect(page.locator("#job-files-path")).to_have_text("/")
    await expect(rows.locator("a[data-file='later.txt']")).to_be_visible()
    await page.click("#lang-toggle")  # Korean labels like the rest of the console
    await expect(page.locator("#view-job h3[data-i18n='job.files']")).to_have_text("파일")
    await page.click("#lang-toggle")
    await _shot(page, "console-files-pane.png")


async def test_U2_a_forbidden_job_shows_only_the_403_never_the_previous_jobs_details(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    erin, frank = stack.api("osl-erin"), stack.api("osl-frank")
    mine = erin.submit("echo mine", name="mine")["id"]
    theirs = frank.submit("echo theirs", name="theirs")["id"]  # a plain user sees only their own
    for api, job_id in ((erin, mine), (frank, theirs)):
        api.wait(job_id, ["COMPLETED"], timeout=30)
    await _login(page, stack, "osl-erin")
    await _english(page)
    await _go(page, stack, f"job/{mine}")
    await expect(page.locator("#job-title")).to_have_text(mine)
    await expect(page.locator("#job-fields")).to_contain_text("osl-erin")
    body, error = page.locator("#job-body"), page.locator("#error")
    fields = page.locator("#job-fields")

    await page.evaluate(f"location.hash = '#/job/{theirs}'")  # from my job to one I may not see
    await expect(error).to_contain_text("Not allowed")
    await expect(error.locator(".err-code")).to_have_text("403 FORBIDDEN")
    await expect(error.locator(".err-server")).to_contain_text("only the owner")  # the server's
    await expect(error).not_to_contain_text("null")
    await expect(body).to_be_hidden()
    await expect(fields).to_be_empty()
    assert await page.locator("#job-title").text_content() == ""
    await _shot(page, "console-job-forbidden.png")

    await page.evaluate("location.hash = '#/job/no-such-job'")
    await expect(error).to_contain_text("Not found")
    await expect(error.locator(".err-server")).to_contain_text("no job 'no-such-job'")
    await expect(body).to_be_hidden()

    # a slow answer for my job arrives after I went on to theirs: it is dropped (request token)
    async def slow(route: Any) -> None:
        await asyncio.sleep(2.5)
        await route.continue_()

    await page.route(f"**/v1/jobs/{mine}", slow)
    await page.route(f"**/v1/jobs/{mine}/events", slow)
    try:
        async with page.expect_request(lambda r: r.url.endswith(f"/v1/jobs/{mine}")):
            await page.evaluate(f"location.hash = '#/job/{mine}'")
        await page.evaluate(f"location.hash = '#/job/{theirs}'")
        await expect(error).to_contain_text("Not allowed")
        await page.wait_for_timeout(3500)  # the slow answers have arrived by now
        await expect(body).to_be_hidden()
        await expect(fields).to_be_empty()
        await expect(page.locator("#job-events")).to_be_empty()
        await expect(error).to_contain_text("Not allowed")
    finally:
        await page.unroute(f"**/v1/jobs/{mine}", slow)
        await page.unroute(f"**/v1/jobs/{mine}/events", slow)
    await page.evaluate(f"location.hash = '#/job/{mine}'")  # and back: mine, without the error
    await expect(page.locator("#job-title")).to_have_text(mine)
    await expect(error).to_be_hidden()


async def test_U2_live_updates_the_job_page_without_a_reload(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    erin = stack.api("osl-erin")
    job_id = erin.submit(stack.hold("live"), name="live")["id"]
    erin.wait(job_id, ["RUNNING"], timeout=30)
    await _login(page, stack, "osl-erin")
    await _english(page)
    await _go(page, stack, f"job/{job_id}")
    state = page.locator("#job-fields dd[data-field=state]")
    await expect(state).to_have_text("RUNNING")
    await expect(page.locator("#job-cancel")).to_be_visible()
    await page.evaluate("window.__same_page = true")  # gone if the page were reloaded
    stack.release("live")
    await expect(state).to_have_text("COMPLETED", timeout=20_000)
    await expect(page.locator("#job-events li").last).to_have_attribute("data-type", "JobEnded")
    await expect(page.locator("#job-cancel")).to_be_hidden()
    assert await page.evaluate("window.__same_page === true")  # no reload happened

    # the queue view follows too: the running table empties without a reload
    busy = erin.submit(stack.hold("live2"), name="live2")["id"]
    erin.wait(busy, ["RUNNING"], timeout=30)
    await page.evaluate("location.hash = '#/queue'")
    row = page.locator("#running-rows tr", has_text=busy)
    await expect(row).to_be_visible()
    stack.release("live2")
    await expect(row).to_have_count(0, timeout=20_000)
    assert await page.evaluate("window.__same_page === true")


async def test_U2_live_updates_stop_while_the_page_is_hidden(
    stack: Stack, browser_page: Page
) -> None:
    page = browser_page
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "queue")
    await expect(page.locator("#queue-rows tr").first).to_be_visible()
    seen: list[str] = []

    def on_request(r: Any) -> None:
        if "/v1/" in r.url:
            seen.append(r.url)

    page.on("request", on_request)
    try:
        await page.evaluate(
            """() => {
              Object.defineProperty(document, "hidden", { value: true, configurable: true });
              Object.defineProperty(
                document, "visibilityState", { value: "hidden", configurable: true });
              document.dispatchEvent(new Event("visibilitychange"));
            }"""
        )
        await page.wait_for_timeout(500)  # a poll already on its way may still land
        seen.clear()
        await page.wait_for_timeout(4000)  # more than one poll period
        assert seen == [], seen
        await page.evaluate(
            """() => {
              delete document.hidden; delete document.visibilityState;
              document.dispatchEvent(new Event("visibilitychange"));
            }"""
        )
        await page.wait_for_timeout(1000)  # shown again: refreshed at once, then polled
        assert any("/v1/queue" in u for u in seen), seen
    finally:
        page.remove_listener("request", on_request)


async def test_U4_queue_and_job_page_show_the_dispatchers_estimated_start(
    stack: Stack, browser_page: Page
) -> None:
    """Real data: every GPU busy with jobs that have a time limit; the waiting job's estimated
    start (the leading dispatcher's forward estimate) is a column of the queue and a field of
    the job page, labelled as an estimate with its basis."""
    page = browser_page
    frank, dave = stack.api("osl-frank"), stack.api("kdg-dave")
    limit = {"time_limit_s": 3600}
    busy = [frank.submit(stack.hold(f"eta{i}"), 2, name="eta", **limit)["id"] for i in range(3)]
    busy.append(dave.submit(stack.hold("eta3"), 2, name="eta", **limit)["id"])  # 8 GPUs busy
    for job_id in busy:
        stack.api("admin").wait(job_id, ["RUNNING"], timeout=30)
    waiting = dave.submit("echo later", 2, name="eta-wait", **limit)["id"]
    # limits, or "predicted" when earlier tests' jobs of these users ended well before their
    # limits (jpu.explain.estimate.RunTimes scales the limits then)
    body = dave.wait(waiting, lambda j: j.get("estimated_start") is not None, timeout=30)
    assert body["estimate_basis"] in ("limits", "predicted"), body
    assert body["estimated_start"] >= body["estimated_at"]  # never in the past
    label = {"limits": "from time limits", "predicted": "from predicted run times"}
    basis = label[body["estimate_basis"]]
    try:
        await _login(page, stack, "kdg-dave")
        await _english(page)
        await _go(page, stack, "queue")
        await expect(page.locator("#queue-eta-head")).to_be_visible()
        row = page.locator("#queue-rows tr", has_text=waiting)
        await expect(row).to_be_visible()
        cells = await row.locator("td").all_text_contents()
        heads = [h.strip() for h in await page.locator("#queue-head th").all_text_contents()]
        eta = heads.index("Estimated start")
        assert cells[-1].strip() in ("Resources", "Reservation", "Priority"), cells
        assert cells[eta].strip() not in ("", "–"), cells  # a time, not a dash
        title = await row.locator("td").nth(eta).get_attribute("title") or ""
        assert title.startswith(f"{basis} · estimated at"), title
        # F4: KDG's usage that orders the queue and, apart, what dave's running job accrued
        charged = heads.index("Lab usage, charged (TFLOP-s)")
        accrued = cells[heads.index("Accrued, not yet charged")].strip()
        assert cells[charged].strip() != "" and float(accrued.replace(",", "")) > 0, cells
        await page.goto(f"{stack.url}/#/job/{waiting}")
        field = page.locator("#job-fields dd[data-field=estimated_start]")
        await expect(field).to_contain_text(basis)
        await expect(page.locator("#job-fields")).to_contain_text("an estimate, not a promise")
        # an unknown start says why, never "unknown (unknown · estimated at …)" (U4)
        admin = stack.api("admin")
        r = admin.http.post("/v1/admin/maintenance", json={"action": "start", "message": "eta"})
        assert r.status_code in (200, 202), r.text
        dave.wait(waiting, lambda j: "maintenance" in (j.get("estimate_reason") or ""), timeout=30)
        await expect(field).to_contain_text("unknown: maintenance is in progress", timeout=15_000)
        assert "(unknown" not in (await field.text_content() or "")
    finally:
        admin = stack.api("admin")
        admin.http.post("/v1/admin/maintenance", json={"action": "end"})
        stack.release(*[f"eta{i}" for i in range(4)])
        wait_until(lambda: admin.get("/v1/maintenance/status")["state"] == "NORMAL", 20, "end")


async def test_F5_U2_a_lab_member_sees_why_the_lab_was_charged_admins_every_lab(
    stack: Stack, browser_page: Page
) -> None:
    """Lab usage → "Why my lab was charged": the lab's charges from
    GET /v1/labs/{lab}/usage/explain, for a member who owns none of them; another lab's are
    refused with a sentence that says whose they are; an admin reaches every lab's."""
    page = browser_page
    erin = stack.api("osl-erin")
    job = erin.submit("sleep 1")["id"]
    erin.wait(job, ["COMPLETED"], timeout=30)
    wait_until(lambda: erin.lab("OSL")["usage"] > 0, 20, "OSL usage charged")
    await _login(page, stack, "osl-frank")  # OSL's other member
    await _go(page, stack, "labs")
    await _english(page)
    await page.click("#charges-link")
    await expect(page.locator("#charges-lab")).to_have_text("OSL")
    row = page.locator("#charge-rows tr", has_text=job)
    await expect(row).to_contain_text("osl-erin")
    await expect(row).to_contain_text("its run")
    await expect(page.locator("#charges-summary")).to_contain_text("the sum of every charge")
    await _shot(page, "console-charges.png")
    await _go(page, stack, "charges/KDG")
    await expect(page.locator("#error")).to_contain_text("Only members of KDG and admins")
    await expect(page.locator("#charge-rows tr")).to_have_count(0)
    await _login(page, stack, "admin")
    await _go(page, stack, "charges/OSL")
    await expect(page.locator("#charge-rows tr", has_text=job)).to_be_visible()
    await expect(page.locator("#charges-labs a", has_text="KDG")).to_be_visible()


async def test_U2_one_date_format_the_clis_and_the_submit_forms_working_directory(
    stack: Stack, browser_page: Page
) -> None:
    """Dates as `jpu show` prints them (YYYY-MM-DD HH:MM:SS, local), in English and Korean; the
    form's working directory is the job's `chdir`, as `jpu submit -D` (SPEC U5)."""
    page = browser_page
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "submit")
    await _english(page)
    here = str(project_dir())  # SEC1: a subdirectory of /tmp, never /tmp itself
    form = {"name": "in-tmp", "tiers": "", "time_limit": "", "chdir": here, "command": "pwd"}
    job_id = await _submit_form(page, {**form, "env": ""})
    job = stack.api("osl-erin").wait(job_id, ["COMPLETED"], timeout=30)
    assert job["chdir"] == here and job["workdir"] == here
    cli_format = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
    for lang in ("en", "ko"):
        await page.evaluate(f"localStorage.setItem('jpu.lang', '{lang}')")
        await page.goto(f"{stack.url}/#/job/{job_id}")
        await page.reload()
        await expect(page.locator("html")).to_have_attribute("lang", lang)
        for field in ("submitted_at", "queue_entered_at", "ended_at"):
            text = await page.locator(f"#job-fields dd[data-field={field}]").text_content()
            assert cli_format.fullmatch((text or "").strip()), (lang, field, text)
        await _go(page, stack, "labs")
        as_of = page.locator("#lab-rows tr", has_text="OSL").locator("td").nth(4)  # As of
        await expect(as_of).to_have_text(cli_format)
    await page.evaluate("localStorage.setItem('jpu.lang', 'en')")


async def test_X4a_workspaces_view_lists_state_and_shows_the_build_log(
    stack: Stack, browser_page: Page
) -> None:
    """Workspaces: own and the lab's with their state; a click shows the build log (this stack
    runs no podman builder, so the workspace stays BUILDING with no log yet)."""
    page = browser_page
    erin = stack.api("osl-erin")
    r = erin.http.post("/v1/workspaces", json={"name": "console-ws", "requirements": "six\n"})
    assert r.status_code in (202, 409), r.text  # 409: built by an earlier run of this module
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "workspaces")
    await _english(page)
    row = page.locator("#ws-rows tr", has_text="console-ws")
    await expect(row).to_contain_text("BUILDING")
    await expect(row).to_contain_text("osl-erin")
    await row.locator("a").click()
    await expect(page.locator("#ws-log-title")).to_have_text("Build log of console-ws")
    await expect(page.locator("#ws-log")).to_contain_text("no build log yet")
    await _login(page, stack, "kdg-carol")  # another lab: not listed
    await _go(page, stack, "workspaces")
    await expect(page.locator("#ws-rows")).to_contain_text("No workspaces")


async def test_X4a_workspaces_view_shows_sets_and_clears_the_users_default_workspace(
    stack: Stack, browser_page: Page
) -> None:
    """The workspaces page shows the user's default (PUT /v1/me/workspace), sets it from a row
    and clears it; each change is the API's (GET /v1/me/workspace agrees)."""
    page = browser_page
    erin = stack.api("osl-erin")
    r = erin.http.post("/v1/workspaces", json={"name": "console-def", "requirements": "six\n"})
    assert r.status_code in (202, 409), r.text  # 409: built by an earlier run of this module
    assert erin.http.put("/v1/me/workspace", json={"workspace": None}).status_code == 200
    await _login(page, stack, "osl-erin")
    await _go(page, stack, "workspaces")
    await _english(page)
    await expect(page.locator("#ws-default")).to_have_text("none (the base image)")
    await expect(page.locator("#ws-default-clear")).to_be_hidden()
    row = page.locator("#ws-rows tr", has_text="console-def")
    await row.locator("button.ws-make-default").click()
    await expect(page.locator("#ws-default")).to_have_text("console-def")
    await expect(row.locator(".ws-is-default")).to_have_text("default")
    assert erin.http.get("/v1/me/workspace").json()["workspace"] == "console-def"
    await _shot(page, "workspaces-default.png")
    await page.click("#ws-default-clear")
    await expect(page.locator("#ws-default")).to_have_text("none (the base image)")
    await expect(row.locator("button.ws-make-default")).to_be_visible()
    assert erin.http.get("/v1/me/workspace").json()["workspace"] is None


async def test_Q7_Q8_jobs_view_shows_an_array_as_one_expandable_row_and_a_jobs_dependency_chain(
    stack: Stack, browser_page: Page
) -> None:
    """A sweep (`0-2%2`) is one row `ID_[0-2%2]` with its tasks per state, expanded to its
    three tasks on a click; the job page of `eval` (afterok:train, train afterok:the sweep) shows
    the chain up to the whole array with each parent's state."""
    page = browser_page
    bob = stack.api("bcg-bob")
    sweep = bob.submit("true", name="sweep", array="0-2%2")["id"]
    train = bob.submit("true", name="train", dependency=f"afterok:{sweep}")["id"]
    evaluate = bob.submit("true", name="eval", dependency=f"afterok:{train}")["id"]
    assert bob.wait(evaluate, ["COMPLETED", "FAILED", "CANCELLED"], timeout=60)["state"] == (
        "COMPLETED"
    )
    await _login(page, stack, "bcg-bob")
    await _english(page)
    await _go(page, stack, "jobs")
    row = page.locator(f"#job-rows tr.array-row[data-array='{sweep}']")
    await expect(row).to_contain_text(f"{sweep}_[0-2%2]")
    await expect(row).to_contain_text("COMPLETED:3")
    tasks = page.locator("#job-rows tr.task-row")
    await expect(tasks).to_have_count(0)
    await row.locator("button.expand").click()
    await expect(tasks).to_have_count(3)
    await expect(tasks.first).to_contain_text(f"{sweep}_0")
    await _shot(page, "jobs-array-expanded.png")
    await page.locator(f"#job-rows tr.array-row[data-array='{sweep}'] button.expand").click()
    await expect(tasks).to_have_count(0)

    await _go(page, stack, f"job/{evaluate}")
    chain = page.locator("#job-fields dd[data-field=dependency]")
    await expect(chain).to_contain_text(f"afterok:{train}")
    parent = chain.locator(f"li[data-parent='{train}']")
    await expect(parent).to_contain_text("train")
    await expect(parent).to_contain_text("COMPLETED")
    array = parent.locator(f"li[data-parent='{sweep}']")
    await expect(array).to_contain_text("COMPLETED:3")
    await _shot(page, "job-dependency-chain.png")

    answers: list[int] = []
    page.on("response", lambda r: answers.append(r.status) if "/events" in r.url else None)
    await array.locator(f"a[href='#/job/{sweep}']").click()  # the array's own page
    await expect(page.locator("#job-fields dd[data-field=states]")).to_have_text("COMPLETED:3")
    await expect(page.locator("#job-fields dd[data-field=tasks] a")).to_have_count(3)
    await expect(page.locator("#job-run-panes")).to_be_hidden()  # each task has its own
    # Q7: the array's page is not "a task of" itself, and none of its calls failed (its
    # events are its own, GET /v1/jobs/{array}/events)
    await expect(page.locator("#job-fields dd[data-field=array_id]")).to_have_count(0)
    await expect(page.locator("#error")).to_be_hidden()
    assert answers and set(answers) == {200}, answers
