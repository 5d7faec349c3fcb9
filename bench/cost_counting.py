"""Counting wrappers for bench/cost: what the library sends to each billed service, counted
client side while the real code runs against the real local servers.

:class:`CostCounter` patches the client classes (process wide, until :meth:`CostCounter.uninstall`):

* **Pub/Sub**: ``pubsub_v1.PublisherClient._gapic_publish`` (every publish request the batching
  publisher sends: messages, bytes, topic) and the GAPIC subscriber's ``pull``, ``acknowledge``
  and ``modify_ack_deadline`` (messages delivered by pull, empty pulls, ack and modack ids).
  A push delivery is counted where it arrives: :func:`wrap_entry` on the ingress function's
  ``handle_push_body`` records one delivery of the body's message.
* **Firestore**: the GAPIC ``FirestoreClient`` RPCs by method, and what Firestore bills for
  them: documents read (each ``found`` or ``missing`` answer of ``batch_get_documents``, which
  document and transactional gets use; each document a query returns, at least one per query),
  documents written and deleted (each write of a ``commit`` or ``batch_write`` that succeeded;
  the writes of a commit that failed, e.g. a ``create`` that met ALREADY_EXISTS, are counted
  apart as ``firestore.writes_failed``).
* **Redis**: every command through redis-py's connection, by name, and round trips - the
  technique (and code) of :class:`bench.compare_workloads.StoreCounter`; connection set-up
  commands are counted apart.
* **Cloud Tasks**: ``CloudTasksClient`` calls by method; a ``create_task`` is
  ``ceil(body / 32 KB)`` billable operations (Cloud Tasks chunks tasks at 32 KB).
* **Invocations**: :func:`wrap_entry` counts calls into an entry point (the ingress function,
  the relay, the consumer's processor) and labels every call made inside it with that
  component, so counts can be split by component as well as summed per path.

Pub/Sub's billable volume of a message is its data, its attributes' keys and values, its
ordering key and, on delivery, 20 bytes of publish time and its message id, with a minimum of
1000 bytes per request; :func:`message_bytes` computes it from the message actually sent.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

from bench.compare_workloads import StoreCounter

PUBSUB_MIN_BYTES = 1000  # Pub/Sub bills at least 1000 bytes per publish, push or pull request
TASK_CHUNK_BYTES = 32 * 1024  # Cloud Tasks counts a task as one operation per 32 KB chunk
_TIMESTAMP_BYTES = 20  # Pub/Sub counts 20 bytes for a delivered message's publish time
UNLABELLED = "client_threads"  # the Pub/Sub clients' own threads: batch publish, pull, ack


def message_bytes(
    data: bytes,
    attributes: Mapping[str, str],
    *,
    ordering_key: str = "",
    message_id: str = "",
    delivered: bool = False,
) -> int:
    """The data volume Pub/Sub bills for one message (before the 1000-byte request minimum)."""
    size = len(data) + len(ordering_key.encode())
    size += sum(len(k.encode()) + len(v.encode()) for k, v in attributes.items())
    if delivered:
        size += _TIMESTAMP_BYTES + len(message_id.encode())
    return size


def topic_role(path: str) -> str:
    """``origin``, ``final`` or ``dead-letter``: the last segment of a topic path (the seeds'
    recipe's own final topic, ``seeds-final``, counts as ``final``)."""
    name = path.rsplit("/", 1)[-1]
    return "final" if name.endswith("final") else name


class CostCounter(StoreCounter):
    """Counts per metric, in total and per component (the entry point a call was made in)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_component: Counter[tuple[str, str]] = Counter()
        self._where = threading.local()
        self._undo: list[Callable[[], None]] = []

    # --- recording ----------------------------------------------------------------------

    @property
    def component(self) -> str:
        return getattr(self._where, "name", UNLABELLED)

    @contextlib.contextmanager
    def inside(self, component: str) -> Iterator[None]:
        """Label the calls this thread makes meanwhile with ``component``."""
        before = getattr(self._where, "name", None)
        self._where.name = component
        try:
            yield
        finally:
            if before is None:
                del self._where.name
            else:
                self._where.name = before

    def add(self, **amounts: int) -> None:
        where = self.component
        with self._lock:
            self.counts.update(amounts)
            for name, value in amounts.items():
                self.by_component[(where, name)] += value

    def add_names(self, prefix: str, names: list[str]) -> None:
        for name in names:
            self.add(**{f"{prefix}{name}": 1})

    def snapshot_by_component(self) -> Counter[tuple[str, str]]:
        with self._lock:
            return Counter(self.by_component)

    # --- installing ---------------------------------------------------------------------

    def install(self) -> None:
        """Patch every client class; :meth:`uninstall` restores them."""
        from redis import connection

        cls = connection.AbstractConnection
        for name in ("send_command", "pack_commands", "send_packed_command"):
            self._undo.append(partial(setattr, cls, name, getattr(cls, name)))
        self._install_redis()
        self._install_firestore()
        self._install_pubsub()
        self._install_tasks()

    def uninstall(self) -> None:
        """Put every patched method back."""
        while self._undo:
            self._undo.pop()()

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        setattr(owner, name, make(original))
        self._undo.append(lambda: setattr(owner, name, original))

    def _install_pubsub(self) -> None:
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]
        from google.pubsub_v1.services.subscriber.client import SubscriberClient

        def publish(original: Any) -> Any:
            @functools.wraps(original)
            def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
                topic = kwargs.get("topic", args[0] if args else "")
                messages = list(kwargs.get("messages", args[1] if len(args) > 1 else []))
                sizes = [
                    message_bytes(bytes(m.data), dict(m.attributes), ordering_key=m.ordering_key)
                    for m in messages
                ]
                role = topic_role(str(topic))
                self.add(
                    **{
                        f"pubsub.publish_requests.{role}": 1,
                        f"pubsub.published.{role}": len(messages),
                        "pubsub.publish_bytes": sum(sizes),
                        "pubsub.publish_billable_bytes": max(PUBSUB_MIN_BYTES, sum(sizes)),
                        # each message as if alone in its request: what an unbatched publish pays
                        "pubsub.publish_billable_bytes_unbatched": sum(
                            max(PUBSUB_MIN_BYTES, s) for s in sizes
                        ),
                    }
                )
                return original(client, *args, **kwargs)

            return counted

        def pull(original: Any) -> Any:
            @functools.wraps(original)
            def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
                response = original(client, *args, **kwargs)
                received = list(response.received_messages)
                if not received:
                    self.add(**{"pubsub.pull_requests_empty": 1})
                    return response
                sizes = [
                    message_bytes(
                        bytes(r.message.data),
                        dict(r.message.attributes),
                        ordering_key=r.message.ordering_key,
                        message_id=r.message.message_id,
                        delivered=True,
                    )
                    for r in received
                ]
                self.add(
                    **{
                        "pubsub.pull_requests": 1,
                        "pubsub.pulled": len(received),
                        "pubsub.pull_bytes": sum(sizes),
                        "pubsub.pull_billable_bytes": max(PUBSUB_MIN_BYTES, sum(sizes)),
                        "pubsub.pull_billable_bytes_unbatched": sum(
                            max(PUBSUB_MIN_BYTES, s) for s in sizes
                        ),
                    }
                )
                return response

            return counted

        def ids_call(metric: str) -> Callable[[Any], Any]:
            def make(original: Any) -> Any:
                @functools.wraps(original)
                def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
                    request = kwargs.get("request")
                    ack_ids = kwargs.get("ack_ids")
                    if ack_ids is None and request is not None:
                        ack_ids = (
                            request.get("ack_ids")
                            if isinstance(request, dict)
                            else getattr(request, "ack_ids", [])
                        )
                    self.add(**{f"{metric}_requests": 1, metric: len(list(ack_ids or []))})
                    return original(client, *args, **kwargs)

                return counted

            return make

        self._patch(pubsub_v1.PublisherClient, "_gapic_publish", publish)
        self._patch(SubscriberClient, "pull", pull)
        self._patch(SubscriberClient, "acknowledge", ids_call("pubsub.acks"))
        self._patch(SubscriberClient, "modify_ack_deadline", ids_call("pubsub.modacks"))

    def _install_firestore(self) -> None:
        from google.cloud.firestore_v1.services.firestore.client import FirestoreClient

        def writes_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
            request = kwargs.get("request", args[0] if args else None)
            if isinstance(request, dict):
                return list(request.get("writes") or [])
            return list(getattr(request, "writes", None) or [])

        def kinds(writes: list[Any]) -> Counter[str]:
            found: Counter[str] = Counter()
            for write in writes:
                pb = getattr(write, "_pb", write)
                found["deletes" if pb.WhichOneof("operation") == "delete" else "writes"] += 1
            return found

        def commit(original: Any) -> Any:
            @functools.wraps(original)
            def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
                found = kinds(writes_of(args, kwargs))
                self.add(**{"firestore.rpc.commit": 1})
                try:
                    response = original(client, *args, **kwargs)
                except Exception:
                    self.add(**{"firestore.writes_failed": sum(found.values())})
                    raise
                self.add(**{f"firestore.{kind}": n for kind, n in found.items()})
                return response

            return counted

        def batch_write(original: Any) -> Any:
            @functools.wraps(original)
            def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
                writes = writes_of(args, kwargs)
                self.add(**{"firestore.rpc.batch_write": 1})
                response = original(client, *args, **kwargs)
                ok = [w for w, s in zip(writes, response.status, strict=False) if s.code == 0]
                self.add(**{f"firestore.{kind}": n for kind, n in kinds(ok).items()})
                self.add(**{"firestore.writes_failed": len(writes) - len(ok)})
                return response

            return counted

        def streamed(rpc: str, per_item: Callable[[Any], Counter[str]], minimum: int) -> Any:
            def make(original: Any) -> Any:
                @functools.wraps(original)
                def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
                    self.add(**{f"firestore.rpc.{rpc}": 1})
                    responses = original(client, *args, **kwargs)

                    def counting() -> Iterator[Any]:
                        total: Counter[str] = Counter()
                        try:
                            for response in responses:
                                total.update(per_item(response))
                                yield response
                        finally:
                            if sum(total.values()) < minimum:
                                total["reads"] += minimum - sum(total.values())
                            self.add(**{f"firestore.{k}": v for k, v in total.items()})

                    return counting()

                return counted

            return make

        def got(response: Any) -> Counter[str]:
            pb = getattr(response, "_pb", response)
            if pb.HasField("found"):
                return Counter(reads=1)
            if pb.missing:
                return Counter(reads=1, reads_missing=1)  # billed: a read that finds nothing
            return Counter()

        def queried(response: Any) -> Counter[str]:
            pb = getattr(response, "_pb", response)
            return Counter(reads=1) if pb.HasField("document") else Counter()

        def single(rpc: str, reads: int = 0) -> Callable[[Any], Any]:
            def make(original: Any) -> Any:
                @functools.wraps(original)
                def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
                    self.add(**{f"firestore.rpc.{rpc}": 1, "firestore.reads": reads})
                    return original(client, *args, **kwargs)

                return counted

            return make

        self._patch(FirestoreClient, "commit", commit)
        self._patch(FirestoreClient, "batch_write", batch_write)
        self._patch(FirestoreClient, "batch_get_documents", streamed("batch_get_documents", got, 0))
        self._patch(FirestoreClient, "run_query", streamed("run_query", queried, 1))
        # An aggregation (count) is one read per up to 1000 index entries: at least one.
        self._patch(FirestoreClient, "run_aggregation_query", single("run_aggregation_query", 1))
        self._patch(FirestoreClient, "get_document", single("get_document", 1))
        for rpc in ("begin_transaction", "rollback", "list_documents", "delete_document"):
            self._patch(FirestoreClient, rpc, single(rpc))

    def _install_tasks(self) -> None:
        from google.cloud.tasks_v2.services.cloud_tasks.client import CloudTasksClient

        def create(original: Any) -> Any:
            @functools.wraps(original)
            def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
                request = kwargs.get("request")
                task = kwargs.get("task") or (
                    request.get("task") if isinstance(request, dict) else None
                )
                body = b""
                if task is not None:
                    http = getattr(task, "http_request", None)
                    engine = getattr(task, "app_engine_http_request", None)
                    body = bytes((http and http.body) or (engine and engine.body) or b"")
                ops = max(1, math.ceil(len(body) / TASK_CHUNK_BYTES))
                self.add(**{"tasks.create_task": 1, "tasks.billable_operations": ops})
                return original(client, *args, **kwargs)

            return counted

        def other(rpc: str) -> Callable[[Any], Any]:
            def make(original: Any) -> Any:
                @functools.wraps(original)
                def counted(client: Any, *args: Any, **kwargs: Any) -> Any:
                    self.add(**{f"tasks.{rpc}": 1, "tasks.billable_operations": 1})
                    return original(client, *args, **kwargs)

                return counted

            return make

        self._patch(CloudTasksClient, "create_task", create)
        for rpc in ("delete_task", "get_task", "run_task"):
            self._patch(CloudTasksClient, rpc, other(rpc))


def push_message_bytes(body: bytes) -> int:
    """The billable volume of the one message in a push request's body."""
    document = json.loads(body)
    message = document.get("message", {})

    data = base64.b64decode(message.get("data", ""))
    return message_bytes(
        data,
        message.get("attributes", {}),
        ordering_key=message.get("orderingKey", ""),
        message_id=message.get("messageId", ""),
        delivered=True,
    )


def wrap_entry(
    counter: CostCounter,
    owner: Any,
    method: str,
    component: str,
    *,
    push: bool = False,
) -> Callable[[], None]:
    """Count calls to ``owner.method`` as invocations of ``component`` and label what they do.

    With ``push``, the call's first argument is a push request body: one push delivery of its
    message is counted too. Returns the undo.
    """
    original = getattr(owner, method)

    @functools.wraps(original)
    def entry(self: Any, *args: Any, **kwargs: Any) -> Any:
        with counter.inside(component):
            extra: dict[str, int] = {}
            if push and args:
                size = push_message_bytes(args[0])
                extra = {
                    "pubsub.push_deliveries": 1,
                    "pubsub.push_bytes": size,
                    "pubsub.push_billable_bytes": max(PUBSUB_MIN_BYTES, size),
                }
            counter.add(**{f"invocations.{component}": 1}, **extra)
            return original(self, *args, **kwargs)

    setattr(owner, method, entry)
    return lambda: setattr(owner, method, original)
