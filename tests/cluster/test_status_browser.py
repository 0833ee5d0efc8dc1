"""The status page as a person sees it: a real headless Chromium (Selenium) on a cluster of
real worker processes.

It logs in through the form (a wrong token first), checks that the tasks, a plot and a
step's timeline appear, runs steps and checks that the page updates, and saves a screenshot
(``status.png`` in the test's tmp folder). Skipped, saying why, where Selenium, Chromium or
its driver is missing (``.ci/run`` installs them on Debian).
"""
import os
import shutil

import numpy as np
import pytest
import trio

import asyncflow as af

from cluster_processes import WorkerProcesses, loopback_spec
from device_kinds import placed_kind

TOKEN = "browser-test-token"
WAIT_S = 60  # a loaded 2-core CI machine: page loads and polls (every 2 s) can be slow

selenium = pytest.importorskip("selenium", reason="Selenium is not installed (the dev extra)")
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                "google-chrome"))), None)
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="no headless browser: install Chromium and its driver (Debian: apt-get install "
           "chromium chromium-driver; .ci/run does)")


@pytest.fixture
def cluster():
    workers = WorkerProcesses()
    spec = loopback_spec({"ps": 1, "worker": 1})
    workers.start(spec, [("ps", 0), ("worker", 0)], env={"ASYNCFLOW_TOKEN": TOKEN},
                  extra=["--status-trace-every", "1"])
    yield spec
    workers.stop_all()


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # The closed network refuses Chromium's background connections: switch them off.
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 "--window-size=1400,1700", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    yield driver
    driver.quit()


def _graph():
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            w = af.Variable(np.ones((8, 1), np.float32), name="w")
        with af.device("/job:worker/task:0"):
            x = af.placeholder(af.float32, [None, 8], name="x")
            loss = af.reduce_mean(af.square(af.matmul(x, w)), name="loss")
            train = af.train.GradientDescentOptimizer(0.01).minimize(loss)
    return graph, w, x, train


def _run_steps(spec, count, initialize=False):
    graph, w, x, train = _graph()

    async def steps():
        with trio.fail_after(WAIT_S):
            async with af.Session(graph=graph, cluster=spec) as sess:
                if initialize:
                    await sess.run(w.initializer)
                for _ in range(count):
                    await sess.run(train, feed_dict={x: np.ones((4, 8), np.float32)})
    before = os.environ.get("ASYNCFLOW_TOKEN")
    os.environ["ASYNCFLOW_TOKEN"] = TOKEN  # the session's token, as a client process reads it
    try:
        trio.run(steps)
    finally:
        if before is None:
            del os.environ["ASYNCFLOW_TOKEN"]
        else:
            os.environ["ASYNCFLOW_TOKEN"] = before


def _texts(driver, selector):
    """The text of every element ``selector`` matches, read in one script: the page redraws
    its tables and timeline as new data arrives, so elements found first and read after may
    be gone by then (selenium's StaleElementReferenceException)."""
    # HTML elements: their rendered text (as selenium's .text); SVG ones: their text without
    # the tooltip a <title> child holds.
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " e => (e.innerText !== undefined"
        " ? e.innerText : Array.from(e.childNodes, n => n.nodeName === 'title' ? ''"
        " : n.textContent).join('')).replace(/\\s+/g, ' ').trim())", selector)


def _steps_of(driver, task):
    cells = _texts(driver, f'#tasks tr[data-task="{task}"] td')
    return int(cells[5]) if len(cells) > 5 and cells[5].isdigit() else -1


def test_the_status_page_shows_tasks_plots_and_a_timeline_and_updates(cluster, browser,
                                                                       tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    wait = WebDriverWait(browser, WAIT_S)
    url = f"http://{cluster['worker'][0]}/status"
    browser.get(url)
    # No token yet: a login form, and no data.
    assert browser.find_element(By.ID, "token")
    assert "/job:" not in browser.page_source
    browser.find_element(By.ID, "token").send_keys("not-the-token")
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    wait.until(lambda d: d.find_elements(By.ID, "login-error"))
    assert "wrong token" in browser.find_element(By.ID, "login-error").text
    assert "/job:" not in browser.page_source
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    # Logged in: both tasks appear, up.
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")) == 2)
    states = _texts(browser, "#tasks td.up")
    assert states == ["up", "up"]
    _run_steps(cluster, 5, initialize=True)
    ps, worker = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"
    wait.until(lambda d: _steps_of(d, worker) >= 5)
    # A plot: a line per task; a timeline: ops on both tasks' devices, Send->Recv arrows.
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#rate-plot path.series")) == 2)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline rect.op"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline path.edge"))
    devices = set(_texts(browser, "#timeline text.device"))
    kind = placed_kind()  # GPU under make test-gpu (its fake is visible to the workers too)
    assert {f"ps:0 {kind}:0", f"worker:0 {kind}:0"} <= devices, devices
    assert all(label.split()[0] in ("ps:0", "worker:0") for label in devices), devices
    link = browser.find_element(By.ID, "trace-download")
    assert link.get_attribute("href").startswith("blob:") and link.is_displayed()
    assert link.get_attribute("download").endswith(".trace.json")
    trace = browser.execute_script("return chromeTrace(window.statusView.timeline)")
    phases = {event["ph"] for event in trace["traceEvents"]}
    assert {"M", "X", "s", "f"} <= phases  # ops, and Send->Recv flow arrows for Perfetto
    first_step = _texts(browser, "#timeline-step")[0]
    assert first_step.startswith("step ")
    edges = _texts(browser, "#edges td")
    assert "worker:0" in edges and "ps:0" in edges
    # More steps: the table's count and the timeline's step move on.
    before = _steps_of(browser, worker)
    _run_steps(cluster, 3)
    wait.until(lambda d: _steps_of(d, worker) >= before + 3)
    wait.until(lambda d: _texts(d, "#timeline-step") != [first_step])
    assert _steps_of(browser, ps) >= 8
    assert browser.get_screenshot_as_file(str(tmp_path / "status.png"))
    assert (tmp_path / "status.png").stat().st_size > 10_000
    # Logging out is closing the browser; a new one without the cookie sees the login again.
    browser.delete_all_cookies()
    browser.get(url)
    assert browser.find_element(By.ID, "token") and "/job:" not in browser.page_source
