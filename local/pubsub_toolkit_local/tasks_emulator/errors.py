"""The one exception the emulator's internals raise to refuse a request with a gRPC status."""

from __future__ import annotations

import grpc


class ApiError(Exception):
    """A request the real Cloud Tasks would refuse, with the status code it would answer."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def invalid_argument(message: str) -> ApiError:
    """INVALID_ARGUMENT: a malformed name or field."""
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(what: str) -> ApiError:
    """NOT_FOUND for the named resource."""
    return ApiError(grpc.StatusCode.NOT_FOUND, f"{what} not found")


def already_exists(message: str) -> ApiError:
    """ALREADY_EXISTS: a duplicate queue, or a task name in use or still reserved."""
    return ApiError(grpc.StatusCode.ALREADY_EXISTS, message)
