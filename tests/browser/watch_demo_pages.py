"""Watch the running `make run` demo's queue pages in Chromium: how many waiting rows show
a bare "—" for their ETA (issue 11: every waiting row shows its ETA or why not).

Not a test (it needs the demo running). Beside `make run`, from the same checkout:
`.venv/bin/python -m tests.browser.watch_demo_pages BASE_URL MINUTES OUT.json`. It logs
in as the demo's cluster admin (var/demo-logins.json), keeps every queue page open (their
rows follow the live stream) and every few seconds counts, per page, the waiting rows and
those whose ETA p50 or p90 cell is empty or only "—"; it reloads each page once a minute
(what a fresh load shows). It prints one JSON line.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

BARE = """() => Array.from(document.querySelectorAll('#pending-rows tr')).map(tr => {
  const cell = f => tr.querySelector('td[data-field=' + f + ']');
  const p50 = cell('eta_p50').innerText.trim(), p90 = cell('eta_p90').innerText.trim();
  const note = tr.querySelector('td[data-field=eta_p50] .eta-none');
  return [tr.querySelector('td[data-field=name]').innerText, p50, p90,
          note ? note.title : '', (tr.querySelector('.reason') || {}).innerText || ''];
})"""


def main() -> None:
    base, minutes, out_path = sys.argv[1].rstrip("/"), float(sys.argv[2]), sys.argv[3]
    login = next(
        x for x in json.loads(Path("var/demo-logins.json").read_text()) if x["tenant"] == "*"
    )
    rows_seen = bare = with_eta = polls = 0
    notes: Counter[str] = Counter()
    samples: dict[str, list[str]] = {}
    bare_samples: list[list[str]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.set_default_timeout(30_000)
        page = context.new_page()
        page.goto(f"{base}/login/?next=/")
        page.get_by_label("Username").fill(login["username"])
        page.get_by_label("Password").fill(login["password"])
        page.get_by_role("button", name="Log in").click()
        page.wait_for_load_state()
        links = set()
        for tenant in re.findall(r'href="(/tenants/[\w-]+/)"', page.content()):
            page.goto(base + tenant)
            links.update(re.findall(r'href="(/tenants/[\w-]+/queues/[\w-]+/)"', page.content()))
        pages = []
        for link in sorted(links):
            p = context.new_page()
            p.goto(base + link)
            pages.append((link, p))
        deadline = time.time() + minutes * 60
        last_reload = time.time()
        while time.time() < deadline:
            polls += 1
            for link, p in pages:
                for name, p50, p90, title, reason in p.evaluate(BARE):
                    rows_seen += 1
                    if p50 in ("", "—") or p90 in ("", "—"):
                        bare += 1
                        if len(bare_samples) < 10:
                            bare_samples.append([link, name, p50, p90, reason[:200]])
                    elif title:
                        notes[p50] += 1
                        samples.setdefault(p50, [title[:300]])
                    else:
                        with_eta += 1
            if time.time() - last_reload > 60:
                for _, p in pages:
                    p.reload()
                last_reload = time.time()
            time.sleep(5)
        browser.close()
    report = {
        "name": "demo_queue_pages",
        "pages": len(links),
        "polls": polls,
        "waiting_rows_seen": rows_seen,
        "with_eta": with_eta,
        "with_reason_for_no_eta": sum(notes.values()),
        "bare_dash": bare,
        "notes": dict(notes),
    }
    Path(out_path).write_text(
        json.dumps({"report": report, "samples": samples, "bare": bare_samples})
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
