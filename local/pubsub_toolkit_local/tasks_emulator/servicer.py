"""The gRPC face of the emulator: service ``google.cloud.tasks.v2.CloudTasks``.

Requests and responses are google-cloud-tasks' own protobuf classes (``Type.pb()``), so the
official client talks to the emulator exactly as to Cloud Tasks. Methods not listed here (IAM,
batch operations, CMEK, locations) answer UNIMPLEMENTED, which gRPC does for unknown methods.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from google.cloud import tasks_v2
from google.protobuf import empty_pb2

from .dispatcher import Dispatcher
from .errors import ApiError
from .policy import Pb
from .state import PAUSED, RUNNING, EmulatorState

logger = logging.getLogger(__name__)

SERVICE_NAME = "google.cloud.tasks.v2.CloudTasks"


def build_handler(state: EmulatorState, dispatcher: Dispatcher) -> grpc.GenericRpcHandler:
    """The generic handler serving every supported CloudTasks method from ``state``."""

    def list_queues(req: Pb) -> Pb:
        if req.filter:
            raise ApiError(grpc.StatusCode.UNIMPLEMENTED, "ListQueues filters are not emulated")
        queues, token = state.list_queues(req.parent, req.page_size, req.page_token)
        return _pb(tasks_v2.ListQueuesResponse)(queues=queues, next_page_token=token)

    def list_tasks(req: Pb) -> Pb:
        tasks, token = state.list_tasks(
            req.parent, req.response_view, req.page_size, req.page_token
        )
        return _pb(tasks_v2.ListTasksResponse)(tasks=tasks, next_page_token=token)

    def delete_queue(req: Pb) -> Pb:
        state.delete_queue(req.name)
        return empty_pb2.Empty()

    def delete_task(req: Pb) -> Pb:
        state.delete_task(req.name)
        return empty_pb2.Empty()

    queue = tasks_v2.Queue
    task = tasks_v2.Task
    methods: dict[str, tuple[Callable[[Pb], Pb], Any, Any]] = {
        "ListQueues": (list_queues, tasks_v2.ListQueuesRequest, tasks_v2.ListQueuesResponse),
        "GetQueue": (lambda r: state.get_queue(r.name), tasks_v2.GetQueueRequest, queue),
        "CreateQueue": (
            lambda r: state.create_queue(r.parent, r.queue),
            tasks_v2.CreateQueueRequest,
            queue,
        ),
        "UpdateQueue": (
            lambda r: state.update_queue(r.queue, list(r.update_mask.paths)),
            tasks_v2.UpdateQueueRequest,
            queue,
        ),
        "DeleteQueue": (delete_queue, tasks_v2.DeleteQueueRequest, None),
        "PurgeQueue": (lambda r: state.purge_queue(r.name), tasks_v2.PurgeQueueRequest, queue),
        "PauseQueue": (
            lambda r: state.set_queue_state(r.name, PAUSED),
            tasks_v2.PauseQueueRequest,
            queue,
        ),
        "ResumeQueue": (
            lambda r: state.set_queue_state(r.name, RUNNING),
            tasks_v2.ResumeQueueRequest,
            queue,
        ),
        "ListTasks": (list_tasks, tasks_v2.ListTasksRequest, tasks_v2.ListTasksResponse),
        "GetTask": (
            lambda r: state.get_task(r.name, r.response_view),
            tasks_v2.GetTaskRequest,
            task,
        ),
        "CreateTask": (
            lambda r: state.create_task(r.parent, r.task, r.response_view),
            tasks_v2.CreateTaskRequest,
            task,
        ),
        "DeleteTask": (delete_task, tasks_v2.DeleteTaskRequest, None),
        "RunTask": (
            lambda r: dispatcher.run_task(r.name, r.response_view),
            tasks_v2.RunTaskRequest,
            task,
        ),
    }
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            _guarded(name, fn),
            request_deserializer=_pb(request_type).FromString,
            response_serializer=(
                empty_pb2.Empty.SerializeToString
                if response_type is None
                else _pb(response_type).SerializeToString
            ),
        )
        for name, (fn, request_type, response_type) in methods.items()
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _pb(proto_plus_type: Any) -> Any:
    """The raw protobuf class behind a proto-plus type."""
    return proto_plus_type.pb()


def _guarded(method: str, fn: Callable[[Pb], Pb]) -> Callable[[Pb, grpc.ServicerContext], Pb]:
    """Turn :class:`ApiError` into the gRPC status it names; anything else into INTERNAL."""

    def handler(request: Pb, context: grpc.ServicerContext) -> Pb:
        try:
            return fn(request)
        except ApiError as err:
            logger.info("%s refused: %s %s", method, err.code.name, err.message)
            context.abort(err.code, err.message)
        except Exception:
            logger.exception("%s failed inside the emulator", method)
            context.abort(grpc.StatusCode.INTERNAL, f"{method} failed inside the emulator")
        raise AssertionError("context.abort() returns only by raising")

    return handler
