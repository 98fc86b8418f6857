#include "server/browser_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace ps::server {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(uint8_t(c)));
  return out;
}

bool is_ipv4_loopback(std::string_view h) {
  // Four dotted decimal parts, the first 127.
  int parts = 0;
  size_t at = 0;
  while (at <= h.size()) {
    const size_t dot = std::min(h.find('.', at), h.size());
    const std::string_view part = h.substr(at, dot - at);
    if (part.empty() || part.size() > 3 ||
        !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    if (std::stoi(std::string(part)) > 255) return false;
    if (parts == 0 && part != "127") return false;
    ++parts;
    at = dot + 1;
    if (dot == h.size()) break;
  }
  return parts == 4;
}

// "http://host:port" -> "host:port"; "" when it is not an origin.
std::string authority_of(std::string_view origin) {
  const size_t scheme = origin.find("://");
  if (scheme == std::string_view::npos) return "";
  std::string_view rest = origin.substr(scheme + 3);
  if (rest.empty() || rest.find('/') != std::string_view::npos) return "";
  return lower(rest);
}

}  // namespace

std::string host_of(std::string_view host_header) {
  std::string h = lower(host_header);
  while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.pop_back();
  while (!h.empty() && (h.front() == ' ' || h.front() == '\t')) h.erase(h.begin());
  if (h.starts_with('[')) {  // [::1]:8080
    const size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(1, close - 1);
  }
  if (std::count(h.begin(), h.end(), ':') == 1) h = h.substr(0, h.find(':'));
  if (!h.empty() && h.back() == '.') h.pop_back();  // "localhost." is localhost
  return h;
}

bool is_loopback_host(std::string_view host) {
  const std::string h = host_of(host);
  return h == "localhost" || h.ends_with(".localhost") || h == "::1" || is_ipv4_loopback(h);
}

std::string check_host(const BrowserPolicy& p, std::string_view host_header) {
  if (host_header.empty()) return "";
  const std::string h = host_of(host_header);
  for (const std::string& a : p.allowed_hosts)
    if (a == "*" || host_of(a) == h) return "";
  const bool loopback_bind = is_loopback_host(p.bind_host);
  if (!loopback_bind && p.allowed_hosts.empty()) return "";
  if (loopback_bind && is_loopback_host(h)) return "";
  if (!loopback_bind && h == host_of(p.bind_host)) return "";
  return fmt::format(
      "the Host '{}' is not this server's (a page on another site can reach a server on this "
      "machine through the browser); list it with --allowed-hosts to serve it",
      std::string(host_header.substr(0, 200)));
}

std::string check_origin(const BrowserPolicy& p, std::string_view origin,
                         std::string_view host_header) {
  if (origin.empty() || !allow_origin_header(p, origin, host_header).empty()) return "";
  const std::string auth = authority_of(origin);
  if (!auth.empty() && auth == lower(host_header)) return "";  // the server's own page
  return fmt::format(
      "requests from web pages of another origin ('{}') are refused; start the server with "
      "--cors ORIGIN to allow one",
      std::string(origin.substr(0, 200)));
}

std::string allow_origin_header(const BrowserPolicy& p, std::string_view origin,
                                std::string_view host_header) {
  (void)host_header;
  if (origin.empty() || p.cors.empty()) return "";
  if (p.cors == "*") return "*";
  return lower(origin) == lower(p.cors) ? std::string(origin) : "";
}

}  // namespace ps::server
