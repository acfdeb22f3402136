"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol: load a page,
collect console messages, exceptions and network requests, measure the plots, screenshot.

Started per call with a fresh ``--user-data-dir`` and stopped by PID.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]

# Per plot: its SVG's rendered size and how many data artists (ids "data-...") have a
# non-empty box; see dataforge.report.page.
PLOTS_JS = """
Array.from(document.querySelectorAll('figure.plot')).map(f => {
  const svg = f.querySelector('svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const marks = svg ? Array.from(svg.querySelectorAll('[id^="data-"]')).filter(e => {
      const b = e.getBBox(); return b.width > 0 || b.height > 0; }).length : 0;
  return {name: f.dataset.plot, width: box.width, height: box.height, marks: marks};
})
"""


def chromium_binary() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise RuntimeError(
            "Debian's chromium is not installed: run `make chromium` (make test does)"
        )
    return path


async def _session(ws_url: str, page_url: str, screenshot: Path, height: int) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    ids = itertools.count(1)
    async with aiohttp.ClientSession() as http:
        port = re.search(r":(\d+)/", ws_url).group(1)
        async with http.put(f"http://127.0.0.1:{port}/json/new?about:blank") as resp:
            target = await resp.json(content_type=None)
        async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:

            async def call(method: str, **params: Any) -> dict[str, Any]:
                call_id = next(ids)
                await ws.send_json({"id": call_id, "method": method, "params": params})
                async for msg in ws:
                    data = msg.json()
                    if data.get("id") == call_id:
                        if "error" in data:
                            raise RuntimeError(f"{method}: {data['error']}")
                        return data["result"]
                    events.append(data)
                raise RuntimeError("DevTools connection closed")

            for domain in ("Runtime", "Log", "Page", "Network"):
                await call(f"{domain}.enable")
            await call("Emulation.setDeviceMetricsOverride", width=1150, height=height,
                       deviceScaleFactor=1, mobile=False)  # fmt: skip
            await call("Page.navigate", url=page_url)
            while not any(e.get("method") == "Page.loadEventFired" for e in events):
                events.append(await asyncio.wait_for(ws.receive_json(), 60))
            result = await call("Runtime.evaluate", expression=PLOTS_JS, returnByValue=True)
            shot = await call("Page.captureScreenshot", format="png")
            screenshot.write_bytes(base64.b64decode(shot["data"]))
    return {"events": events, "plots": result["result"]["value"]}


def render(html: Path, screenshot: Path, profile: Path, height: int = 900) -> dict[str, Any]:
    """Load ``html`` in a fresh headless Chromium. Returns ``errors`` (console errors and
    warnings, exceptions, log entries of level error), ``requests`` (URLs other than the page
    itself) and ``plots`` (see ``PLOTS_JS``); writes the first screen to ``screenshot``."""
    proc = subprocess.Popen(
        [chromium_binary(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ws_url = None
        for line in proc.stderr:
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                ws_url = match.group(1)
                break
        assert ws_url, "chromium did not start its DevTools endpoint"
        # keep reading its log so that a full pipe never blocks it
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        page_url = html.resolve().as_uri()
        out = asyncio.run(_session(ws_url, page_url, screenshot, height))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    errors, requests = [], []
    for event in out["events"]:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params["type"] in (
            "error",
            "warning",
            "assert",
        ):
            errors.append(str(params["args"]))
        elif method == "Runtime.exceptionThrown":
            errors.append(str(params["exceptionDetails"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
            errors.append(params["entry"]["text"])
        elif method == "Network.requestWillBeSent" and params["request"]["url"] != page_url:
            requests.append(params["request"]["url"])
    return {"errors": errors, "requests": requests, "plots": out["plots"]}
