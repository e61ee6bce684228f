#!/usr/bin/env python3
"""Drives the dashboard's review page in headless Chromium, as a reviewer would, and prints
what it saw as one JSON object. Chromium is driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: it reads requests on fd 3, writes answers on fd 4, each a JSON
text ended by NUL), so no port is opened. Every wait is a condition polled with a deadline.

    review_page.py CHROMIUM URL PROFILE_DIR JOB NEW_INDEX

JOB: the card whose thumbnail is clicked (its video must play) and whose "Reject + another
take" is pressed; NEW_INDEX: the index the take it adds gets (its card must appear).
Exit 0 with the JSON when every step happened; exit 1 naming the step that did not.
"""
import fcntl
import json
import os
import subprocess
import sys
import time

chromium, url, profile, job, new_index = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])


def high(fd):
    """The descriptor moved above 9, so that 3 and 4 are free to be made in the child."""
    h = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return h


to_chrome_r, to_chrome_w = (high(f) for f in os.pipe())
from_chrome_r, from_chrome_w = (high(f) for f in os.pipe())


def child_fds():
    os.dup2(to_chrome_r, 3)
    os.dup2(from_chrome_w, 4)


browser = subprocess.Popen(
    [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
     "--user-data-dir=" + profile, "--autoplay-policy=no-user-gesture-required",
     "--window-size=1400,1000", "about:blank"],
    pass_fds=(to_chrome_r, from_chrome_w, 3, 4), preexec_fn=child_fds,
    stdout=subprocess.DEVNULL, stderr=open(profile + ".log", "wb"))
os.close(to_chrome_r)
os.close(from_chrome_w)
pending = b""
next_id = 0


def call(method, params=None, session=None, timeout=30):
    """One request; its result (raises on an error answer or no answer in time)."""
    global pending, next_id
    next_id += 1
    msg = {"id": next_id, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    os.write(to_chrome_w, json.dumps(msg).encode() + b"\0")
    deadline = time.monotonic() + timeout
    while True:
        while b"\0" in pending:
            text, pending = pending.split(b"\0", 1)
            answer = json.loads(text)
            if answer.get("id") == next_id:
                if "error" in answer:
                    raise RuntimeError(method + ": " + json.dumps(answer["error"]))
                return answer.get("result", {})
        if time.monotonic() > deadline:
            raise RuntimeError(method + ": no answer in " + str(timeout) + " s")
        chunk = os.read(from_chrome_r, 65536)
        if not chunk:
            raise RuntimeError(method + ": chromium closed the pipe")
        pending += chunk


seen = {}


def fail(step):
    seen["failed"] = step
    print(json.dumps(seen))
    browser.kill()
    sys.exit(1)


try:
    target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    call("Page.navigate", {"url": url}, session)

    def js(expr):
        r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                      "awaitPromise": True, "userGesture": True}, session)
        if "exceptionDetails" in r:
            raise RuntimeError(expr + ": " + json.dumps(r["exceptionDetails"])[:500])
        return r["result"].get("value")

    def until(expr, seconds, step):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if js("!!(" + expr + ")"):
                return True
            time.sleep(0.1)  # polling the page's state
        fail(step)

    card = "document.querySelector('#review .card[data-index=\"%d\"]')" % job
    # The cards, named; the card's thumbnail loaded (a frame of the video).
    until(card + " && " + card + ".querySelector('img.thumb') && " + card +
          ".querySelector('img.thumb').complete && " + card + ".querySelector('img.thumb').naturalWidth > 0",
          60, "the card's thumbnail loaded")
    seen["titles"] = js("[...document.querySelectorAll('#review .card .title')].map(e => e.textContent)")
    seen["prompts"] = js("[...document.querySelectorAll('#review .card .prompt')].map(e => e.textContent)")
    seen["thumb"] = js("(() => { const i = %s.querySelector('img.thumb'); return {src: i.getAttribute('src'), "
                       "width: i.naturalWidth, height: i.naturalHeight}; })()" % card)
    # A click on the thumbnail plays the video: its position moves on.
    js(card + ".querySelector('img.thumb').click()")
    until(card + ".querySelector('video') && " + card + ".querySelector('video').currentTime > 0.2",
          30, "the video played")
    first = js(card + ".querySelector('video').currentTime")
    until(card + ".querySelector('video').currentTime > %f || %s.querySelector('video').ended" % (first, card),
          30, "the video's position moved on")
    seen["played"] = js("({current: %s.querySelector('video').currentTime, first: %f, "
                        "duration: %s.querySelector('video').duration, "
                        "data_played: %s.dataset.played})" % (card, first, card, card))
    # Reject, asking for another take: the coordinator's verdict shows, the take's card comes.
    until(card + ".querySelector('button[data-action=\"retake\"]')", 10, "the verdict buttons")
    js(card + ".querySelector('button[data-action=\"retake\"]').click()")
    until(card + ".dataset.verdict === 'rejected'", 30, "the card shows the verdict")
    new_card = "document.querySelector('#review .card[data-index=\"%d\"]')" % new_index
    until(new_card, 30, "the take's card appeared")
    seen["verdict"] = js(card + ".querySelector('.verdict').textContent")
    seen["new_title"] = js(new_card + ".querySelector('.title').textContent")
    seen["new_verdict_text"] = js(new_card + ".querySelector('.verdict').textContent")
except Exception as e:  # noqa: BLE001 - every failure is reported as the step it broke
    fail("protocol: " + str(e))
print(json.dumps(seen))
browser.kill()
browser.wait()
