"""Headless Chromium for the viewer's browser tests and benchmark.

Debian's `chromium` and `chromium-driver` packages, driven by Selenium. No
network: the browser is started with every background service off and a
fresh profile, and the page itself forbids network access (its
Content-Security-Policy).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

CHROMIUM = next((p for p in (shutil.which("chromium"),
                             shutil.which("chromium-browser"))
                 if p), None)
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver")
    else None)


def missing() -> str | None:
  """Why the browser tests cannot run here, or None."""
  try:
    import selenium  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return "selenium is not installed (pip install -e '.[test]')"
  if CHROMIUM is None or CHROMEDRIVER is None:
    return "chromium/chromedriver are not installed (apt-get install chromium chromium-driver)"
  return None


@contextlib.contextmanager
def chromium(width: int = 1500, height: int = 950):
  """A headless Chromium WebDriver with a fresh profile."""
  from selenium import webdriver  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.chrome.service import Service  # pylint: disable=g-import-not-at-top
  profile = tempfile.mkdtemp(prefix="jaxpr-viewer-chromium-")
  options = webdriver.ChromeOptions()
  options.binary_location = CHROMIUM
  for flag in ("--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
               f"--user-data-dir={profile}",
               f"--window-size={width},{height}"):
    options.add_argument(flag)
  driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
  try:
    yield driver
  finally:
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def open_page(driver, path, timeout: float = 120.0) -> None:
  """Opens a viewer page from file:// and waits until it has drawn."""
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  driver.get("file://" + os.path.abspath(path))
  WebDriverWait(driver, timeout).until(lambda d: d.execute_script(
      "return window.jaxprViewer && (window.jaxprViewer.ready || "
      "window.jaxprViewer.error !== undefined)"))


def open_page_without_file(driver, path, timeout: float = 60.0) -> None:
  """Opens the shipped page (no file in it) and waits for its script."""
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  driver.get("file://" + os.path.abspath(path))
  WebDriverWait(driver, timeout).until(lambda d: d.execute_script(
      "return document.readyState === 'complete' && !!window.jaxprViewer"))
