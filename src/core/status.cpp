#include "slipway/core.h"

namespace slipway {

Status invalid_argument(std::string message) { return {StatusCode::kInvalidArgument, std::move(message)}; }
Status not_found(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
Status already_exists(std::string message) { return {StatusCode::kAlreadyExists, std::move(message)}; }
Status failed_precondition(std::string message) { return {StatusCode::kFailedPrecondition, std::move(message)}; }
Status permission_denied(std::string message) { return {StatusCode::kPermissionDenied, std::move(message)}; }
Status data_loss(std::string message) { return {StatusCode::kDataLoss, std::move(message)}; }
Status unavailable(std::string message) { return {StatusCode::kUnavailable, std::move(message)}; }
Status resource_exhausted(std::string message) { return {StatusCode::kResourceExhausted, std::move(message)}; }
Status deadline_exceeded(std::string message) { return {StatusCode::kDeadlineExceeded, std::move(message)}; }
Status io_error(std::string message) { return {StatusCode::kIo, std::move(message)}; }
Status internal_error(std::string message) { return {StatusCode::kInternal, std::move(message)}; }

std::string_view slipway_version() { return SLIPWAY_VERSION; }

}  // namespace slipway
