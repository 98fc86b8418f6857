#pragma once
// What a browser may do with the server, as pure decisions over a request's Host and Origin
// headers, so that every rule is tested without sockets.
//
// DNS rebinding: a web page on attacker.example, whose name is then pointed at 127.0.0.1, can
// send requests to a server on the user's loopback address; they carry `Host: attacker.example`.
// A server bound to loopback therefore answers only requests whose Host names a loopback
// address (or one of --allowed-hosts). Cross-origin requests: any page may send a simple POST to
// 127.0.0.1; browsers mark it with `Origin`, so a request whose Origin is neither the server's
// own nor the one --cors allows is refused before it reaches a model.
#include <string>
#include <string_view>
#include <vector>

namespace ps::server {

struct BrowserPolicy {
  std::string bind_host = "127.0.0.1";     // --host
  std::vector<std::string> allowed_hosts;  // --allowed-hosts (names or addresses; "*": any)
  std::string cors;                        // --cors: "" (none), an origin, or "*"
};

// "localhost", "*.localhost", 127.0.0.0/8, "::1" (also bracketed).
bool is_loopback_host(std::string_view host);
// The host of a Host header's value ("[::1]:8080" -> "::1", "Example.com:80" -> "example.com").
std::string host_of(std::string_view host_header);

// "" when a request with this Host header may be served, else why not (for a 403). A server
// bound to a loopback address takes loopback names and --allowed-hosts; one bound elsewhere
// takes any Host unless --allowed-hosts lists some. An absent Host (HTTP/1.0 clients) passes.
std::string check_host(const BrowserPolicy& p, std::string_view host_header);

// "" when a request with this Origin may be served (none, the server's own, or what --cors
// allows), else why not.
std::string check_origin(const BrowserPolicy& p, std::string_view origin,
                         std::string_view host_header);

// The Access-Control-Allow-Origin value for an allowed cross-origin request ("" for none).
std::string allow_origin_header(const BrowserPolicy& p, std::string_view origin,
                                std::string_view host_header);

}  // namespace ps::server
