"""A real headless Chromium (Debian's `chromium` and `chromium-driver`) driven by Selenium,
for the tests of pages: the local workspace's run pages and Airflow's UI.

`.ci/services.sh` installs both packages; where they are missing the tests that need them
skip (fail under `CI`), as the deployment services do (tests/deployment_services.py).
Nothing is fetched from outside the machine: no Selenium Manager download (the system
driver is given), and the browser's own background traffic is switched off.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deployment_services import Service, require_services

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)
# Generous: a loaded machine renders slowly; a wait ends as soon as its event happens.
EVENT_TIMEOUT_S = 120.0


def _browser_installed() -> None:
    for program in ("chromium", "chromedriver"):
        if shutil.which(program) is None:
            raise FileNotFoundError(program)


CHROMIUM_SERVICE = Service(
    "Headless Chromium (Debian packages chromium, chromium-driver)",
    ("chromium", "chromedriver"),
    _browser_installed,
)


def require_browser() -> None:
    require_services(CHROMIUM_SERVICE)


@contextmanager
def chromium() -> Iterator[Any]:
    """A Selenium WebDriver of a fresh headless Chromium with a new, empty profile."""
    require_browser()
    os.environ.setdefault("SE_AVOID_STATS", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    profile = tempfile.mkdtemp(prefix="airo-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=DriverService(shutil.which("chromedriver") or CHROMEDRIVER)
    )
    driver.set_page_load_timeout(EVENT_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_until(driver: Any, condition: Callable[[Any], Any], message: str) -> Any:
    """Wait for an event on the page (polled by Selenium); fails after EVENT_TIMEOUT_S."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.wait import WebDriverWait

    # A page that re-renders (Airflow's UI does) replaces elements while they are read.
    wait = WebDriverWait(
        driver,
        EVENT_TIMEOUT_S,
        poll_frequency=0.1,
        ignored_exceptions=(StaleElementReferenceException,),
    )
    return wait.until(condition, message)


def screenshot(driver: Any, name: str) -> None:
    """Save a PNG of the whole page into $AIRO_SCREENSHOT_DIR when it is set (to look at
    what a test saw)."""
    folder = os.environ.get("AIRO_SCREENSHOT_DIR")
    if not folder:
        return
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(max(int(height) + 160, 600), 2400))
    Path(folder).mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(Path(folder) / name))
