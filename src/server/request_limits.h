#pragma once
// What a request's headers may be before its body is read: how many and how large, its framing
// (RFC 9112: one length, not both a length and chunked) and its encoding (no compressed bodies:
// a few kilobytes of gzip inflate to gigabytes past the body limit). Pure decisions over the
// header fields, so every rule is tested without sockets.
#include <string>
#include <utility>
#include <vector>

namespace ps::server {

inline constexpr size_t kMaxHeaderFields = 100;
inline constexpr size_t kMaxHeaderBytes = size_t(64) << 10;

struct HeaderVerdict {
  int status = 0;    // 0: acceptable; else 400, 415 or 431
  std::string type;  // the error object's type
  std::string message;
};

// The fields as received, names in any case.
HeaderVerdict check_request_headers(const std::vector<std::pair<std::string, std::string>>& fields);

}  // namespace ps::server
