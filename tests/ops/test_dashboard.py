"""The status page in a real headless Chromium, against a known workload on the local stack.

Workload through origin (ingress under functions-framework, push from the emulator):
4 distinct messages each published twice (4 duplicates), one message delayed an hour (one Cloud
Tasks task), FIFO group ``g-gap`` numbered 1-4 with #2 held back (a gap: 1 processed, 3 and 4
parked), and 3 contract violations of two reasons. `pubsub-toolkit dashboard` runs as its own
process (own process group); the DOM must show exactly those numbers, and the page must follow
when #2 is finally published.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from google.cloud import firestore, pubsub_v1

from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter
from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore
from pubsub_toolkit_local.processes import ServiceSpec, free_port, start_service
from pubsub_toolkit_local.servers import http_ok_json
from pubsub_toolkit_local.stack import LocalStack
from tests.ops.conftest import StackFactory, recording_consumer
from tests.support.waiting import wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
CONSUMER = "dash-consumer"
GROUP = "g-gap"


def publish(stack: LocalStack, data: bytes, **attributes: str) -> None:
    assert stack.topology is not None
    publisher = pubsub_v1.PublisherClient()
    publisher.publish(stack.topology.origin, data, **attributes).result(timeout=30)


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_status_page_shows_the_workload_and_follows_changes(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium package "
            "(apt-get install chromium; `make system-deps` does it)"
        )
    from playwright.sync_api import sync_playwright

    stack = make_stack()
    project = stack.env["GOOGLE_CLOUD_PROJECT"]
    client = firestore.Client(project=project)
    counter, fifo = FirestoreSequenceCounter(client), FirestoreFifoStore(client)

    with recording_consumer(stack, CONSUMER) as seen:
        for i in range(4):
            publish(stack, f"order {i}".encode(), dedup_key=f"dup-{i}")
        wait_until(lambda: len(seen.handled) == 4, timeout=60, what="4 originals handled")
        for i in range(4):  # the same messages again: duplicates at ingress
            publish(stack, f"order {i}".encode(), dedup_key=f"dup-{i}")
        publish(stack, b"later", dedup_key="delayed-1", delay_seconds="3600")
        numbers = [counter.reserve(GROUP).first for _ in range(4)]
        assert numbers == [1, 2, 3, 4]
        for seq in (1, 3, 4):  # #2 is "lost" for now: a gap
            publish(stack, f"step {seq}".encode(), fifo_group=GROUP, fifo_seq=str(seq))
        publish(stack, b"bad", delay_seconds="-1")
        publish(stack, b"bad", delay_seconds="soon")
        publish(stack, b"bad", fifo_seq="1")
        wait_until(
            lambda: fifo.load(CONSUMER, GROUP).parked == (3, 4), timeout=60, what="3, 4 parked"
        )

        port = free_port()
        dashboard = start_service(
            ServiceSpec(
                name="dashboard",
                argv=(
                    sys.executable,
                    "-m",
                    "pubsub_toolkit_cli.cli",
                    "dashboard",
                    f"--port={port}",
                    f"--consumer-id={CONSUMER}",
                    "--refresh=1",
                ),
                port=port,
                ready=http_ok_json(port, "/status.json"),
                env=stack.env,
                startup_timeout=60,
            ),
            tmp_path / "logs",
        )
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
                )
                try:
                    page = browser.new_page(viewport=VIEWPORT)
                    page.goto(f"http://127.0.0.1:{port}/", wait_until="load")
                    check_page(page, seen_group=GROUP, tmp_path=tmp_path)
                    # Change the state: the lost #2 arrives; the page must follow by itself.
                    publish(stack, b"step 2", fifo_group=GROUP, fifo_seq="2")

                    def caught_up() -> bool:
                        row = page.locator(f"#fifo-groups tr[data-group='{GROUP}']")
                        return (
                            field(row, "last_processed") == "4"
                            and field(row, "parked") == "0"
                            and page.inner_text("#dedup-deliveries") == "16"
                        )

                    wait_until(caught_up, timeout=60, what="the page to show #2..#4 processed")
                    assert seen.handled_in(GROUP) == [1, 2, 3, 4]
                finally:
                    browser.close()
        finally:
            dashboard.stop()
    assert not dashboard.alive()


def field(row: object, name: str) -> str:
    return str(row.locator(f"td[data-field='{name}']").inner_text())  # type: ignore[attr-defined]


def check_page(page: object, *, seen_group: str, tmp_path: Path) -> None:
    """The rendered numbers equal the workload's, and the key ones are visible on screen."""
    p = page  # playwright's Page (untyped here)

    # Ingress counters arrive with the next flush (every 0.5 s here): wait for them.
    # Deliveries: 4 originals + 4 duplicates + 1 delayed + 3 FIFO + 3 violations = 15.
    def counted() -> bool:
        return bool(p.inner_text("#dedup-deliveries") == "15")  # type: ignore[attr-defined]

    wait_until(counted, timeout=60, what="15 ingress deliveries on the page")
    assert p.inner_text("#dedup-duplicates") == "4"  # type: ignore[attr-defined]
    assert p.inner_text("#dedup-hit-rate") == "26.7%"  # type: ignore[attr-defined]
    assert p.inner_text("#scheduled-count") == "1"  # type: ignore[attr-defined]
    assert p.inner_text("#dead-letter-total") == "3"  # type: ignore[attr-defined]

    def reason(name: str) -> str:
        return str(
            p.inner_text(  # type: ignore[attr-defined]
                f"#dead-letters tr[data-reason='{name}'] td[data-field='count']"
            )
        )

    assert reason("invalid_delay_seconds") == "2"
    assert reason("fifo_seq_without_group") == "1"
    row = p.locator(f"#fifo-groups tr[data-group='{seen_group}']")  # type: ignore[attr-defined]
    assert field(row, "last_issued") == "4"
    assert field(row, "last_processed") == "1"
    assert field(row, "parked") == "2"
    gap_age = field(row, "gap_age")  # relative: "12 s ago" (the absolute time in its title)
    assert gap_age.endswith(" ago") or gap_age == "just now", gap_age
    assert field(row, "state") == "waiting for 2"

    shot = tmp_path / "dashboard.png"
    p.screenshot(path=str(shot))  # type: ignore[attr-defined]
    assert png_size(shot) == (VIEWPORT["width"], VIEWPORT["height"])
    assert shot.stat().st_size > 20_000, "a near-empty screenshot"
    for selector in (
        "#dedup-hit-rate",
        "#scheduled-count",
        "#dead-letter-total",
        f"#fifo-groups tr[data-group='{seen_group}']",
    ):
        box = p.locator(selector).bounding_box()  # type: ignore[attr-defined]
        assert box is not None, selector
        assert box["x"] >= 0 and box["y"] >= 0, selector
        assert box["x"] + box["width"] <= VIEWPORT["width"], selector
        assert box["y"] + box["height"] <= VIEWPORT["height"], selector
