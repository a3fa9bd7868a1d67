"""The error responses of the REST surface: `{"error_code", "message"}` with a status."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, error_code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


def not_found(message: str) -> ApiError:
    return ApiError(404, "RESOURCE_DOES_NOT_EXIST", message)


def invalid(message: str) -> ApiError:
    return ApiError(400, "INVALID_PARAMETER_VALUE", message)
