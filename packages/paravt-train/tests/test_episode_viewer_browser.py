"""The episode viewer in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`) opens the page of a recorded run from the file system; the DOM must hold the
episodes, their crop windows and reward parts, and a filter must change what is shown. Saves a
screenshot (PARAVT_VIEWER_SCREENSHOT, default: the test's temporary folder)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from paravt.train.episode_report import write_html

from .episode_fixture import record_run

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1600",
)


def _browser_paths() -> tuple[str, str]:
    binary = next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.skip(
            "headless Chromium not found (chromium and chromedriver on PATH): "
            "apt-get install -y chromium chromium-driver (.ci/run installs them)"
        )
    return binary, driver


@pytest.fixture
def browser(tmp_path: Path) -> Any:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    binary, driver_path = _browser_paths()
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.timeout(180)
def test_the_viewer_shows_episodes_windows_and_rewards_and_filters_them(
    browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    run = record_run(tmp_path / "run")
    page = write_html(run)
    browser.get(page.resolve().as_uri())

    cards = browser.find_elements(By.CSS_SELECTOR, "section.episode")
    assert len(cards) == 36
    assert browser.find_element(By.ID, "f-count").text == "36 of 36 episodes"
    # the step table, its sparklines and the trend line
    assert len(browser.find_elements(By.CSS_SELECTOR, "#step-table tbody tr")) == 6
    assert len(browser.find_elements(By.CSS_SELECTOR, ".spark polyline")) >= 6
    assert "INVALID CALLS RISING" in browser.find_element(By.ID, "trend").text
    # crop windows drawn on the timelines, the parser's reasons on the calls, sub-agent frames
    windows = browser.find_elements(By.CSS_SELECTOR, ".crop-window")
    assert any("ok" in w.get_attribute("class") for w in windows)
    assert any("invalid" in w.get_attribute("class") for w in windows)  # the 8.0-8.0 window
    assert browser.find_elements(By.CSS_SELECTOR, "mark.issue[data-kind='invalid_arguments']")
    assert browser.find_elements(By.CSS_SELECTOR, ".report .thumb img")
    loaded = browser.execute_script(
        "return Array.from(document.querySelectorAll('.overview img'))"
        ".slice(0, 4).map(i => i.complete && i.naturalWidth)"
    )
    assert loaded and all(loaded), "overview thumbnails did not load from the file system"
    parts = {
        p.get_attribute("data-part")
        for p in cards[0].find_elements(By.CSS_SELECTOR, ".reward-part")
    }
    assert {"total", "accuracy", "format", "anchor", "tool", "penalty"} <= parts

    # a filter: only episodes with invalid calls
    browser.find_element(By.ID, "f-invalid").click()
    shown = browser.find_elements(By.CSS_SELECTOR, "section.episode")
    assert 0 < len(shown) < 36
    assert all(c.get_attribute("data-invalid") == "1" for c in shown)
    assert browser.find_element(By.ID, "f-count").text == f"{len(shown)} of 36 episodes"
    browser.find_element(By.ID, "f-invalid").click()
    # the leaked-prior filter and a step picked from the table
    browser.find_element(By.ID, "f-leak").click()
    leaked = browser.find_elements(By.CSS_SELECTOR, "section.episode")
    assert leaked and all("leaked prior" in c.text for c in leaked)
    browser.find_element(By.ID, "f-leak").click()
    browser.find_element(By.CSS_SELECTOR, "#step-table tbody tr[data-step='6']").click()
    assert {
        c.get_attribute("data-step")
        for c in browser.find_elements(By.CSS_SELECTOR, "section.episode")
    } == {"6"}

    browser.find_element(By.CSS_SELECTOR, "#f-step option[value='']").click()  # all steps again
    assert len(browser.find_elements(By.CSS_SELECTOR, "section.episode")) == 36
    shot = Path(os.environ.get("PARAVT_VIEWER_SCREENSHOT", tmp_path / "episode_viewer.png"))
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


@pytest.mark.timeout(180)
def test_the_viewer_pages_a_long_run(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    run = record_run(tmp_path / "run", steps=20, prompts=4, per_k=4)
    page = write_html(run, page_size=50)
    browser.get(page.resolve().as_uri())
    assert len(browser.find_elements(By.CSS_SELECTOR, "section.episode")) == 50
    assert browser.find_element(By.ID, "page").text == "page 1 of 4"
    browser.find_element(By.ID, "next").click()
    assert browser.find_element(By.ID, "page").text == "page 2 of 4"
    assert len(browser.find_elements(By.CSS_SELECTOR, "section.episode")) == 50
