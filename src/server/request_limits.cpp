#include "server/request_limits.h"

#include <fmt/format.h>

#include <cctype>

namespace ps::server {
namespace {

std::string lower(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = char(std::tolower(uint8_t(c)));
  return out;
}

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") + 1 - a);
}

HeaderVerdict refuse(int status, std::string type, std::string message) {
  return {status, std::move(type), std::move(message)};
}

}  // namespace

HeaderVerdict check_request_headers(
    const std::vector<std::pair<std::string, std::string>>& fields) {
  if (fields.size() > kMaxHeaderFields)
    return refuse(
        431, "request_header_fields_too_large",
        fmt::format("{} header fields; at most {} are taken", fields.size(), kMaxHeaderFields));
  size_t bytes = 0;
  std::vector<std::string> lengths;
  std::string transfer, encoding;
  for (const auto& [name, value] : fields) {
    bytes += name.size() + value.size() + 4;
    const std::string n = lower(name);
    if (n == "content-length") lengths.push_back(trimmed(value));
    std::string* list = n == "transfer-encoding"  ? &transfer
                        : n == "content-encoding" ? &encoding
                                                  : nullptr;
    if (list) {
      if (!list->empty()) list->push_back(',');
      list->append(lower(trimmed(value)));
    }
  }
  if (bytes > kMaxHeaderBytes)
    return refuse(
        431, "request_header_fields_too_large",
        fmt::format("{} bytes of header fields; at most {} are taken", bytes, kMaxHeaderBytes));
  for (const std::string& l : lengths)
    if (l != lengths.front())
      return refuse(400, "invalid_request_error",
                    "two different Content-Length headers: the body's length is ambiguous");
  if (!lengths.empty() && !transfer.empty())
    return refuse(400, "invalid_request_error",
                  "both Content-Length and Transfer-Encoding: the body's length is ambiguous");
  if (!transfer.empty() && transfer != "chunked")
    return refuse(400, "invalid_request_error",
                  fmt::format("Transfer-Encoding '{}' is not taken (only chunked)", transfer));
  if (!encoding.empty() && encoding != "identity")
    return refuse(415, "unsupported_media_type_error",
                  fmt::format("compressed request bodies are not taken (Content-Encoding: {}); "
                              "send the body uncompressed",
                              encoding));
  return {};
}

}  // namespace ps::server
