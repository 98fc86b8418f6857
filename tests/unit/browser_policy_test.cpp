// What a browser may do with the server (server/browser_policy.h): Host against DNS rebinding,
// Origin against cross-origin requests, and the CORS answer --cors gives.
#include "server/browser_policy.h"

#include <gtest/gtest.h>

namespace ps::server {
namespace {

TEST(BrowserPolicy, LoopbackNames) {
  for (const char* h : {"localhost", "LOCALHOST:8080", "app.localhost", "127.0.0.1", "127.1.2.3:99",
                        "[::1]:8080", "::1", "localhost."})
    EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"evil.example", "128.0.0.1", "127.0.0.256", "127.0.0", "localhost.evil",
                        "10.0.0.1", "[::2]", "0.0.0.0", "", "127.0.0.1.evil.example"})
    EXPECT_FALSE(is_loopback_host(h)) << h;
  EXPECT_EQ(host_of("Example.COM:443"), "example.com");
  EXPECT_EQ(host_of("[::1]:8080"), "::1");
}

TEST(BrowserPolicy, ALoopbackServerServesLoopbackHostsOnly) {
  BrowserPolicy p;  // 127.0.0.1
  EXPECT_EQ(check_host(p, "127.0.0.1:8080"), "");
  EXPECT_EQ(check_host(p, "localhost:8080"), "");
  EXPECT_EQ(check_host(p, ""), "");  // HTTP/1.0: no Host
  const std::string why = check_host(p, "attacker.example:8080");
  EXPECT_NE(why.find("'attacker.example:8080'"), std::string::npos) << why;
  EXPECT_NE(why.find("--allowed-hosts"), std::string::npos) << why;
  p.allowed_hosts = {"myhost.lan"};
  EXPECT_EQ(check_host(p, "MyHost.lan:8080"), "");
  EXPECT_NE(check_host(p, "other.lan"), "");
  p.allowed_hosts = {"*"};
  EXPECT_EQ(check_host(p, "anything.example"), "");
}

TEST(BrowserPolicy, ANetworkServerServesAnyHostUnlessListed) {
  BrowserPolicy p;
  p.bind_host = "0.0.0.0";
  EXPECT_EQ(check_host(p, "gpu-box.lan:8080"), "");
  p.allowed_hosts = {"gpu-box.lan"};
  EXPECT_EQ(check_host(p, "gpu-box.lan:8080"), "");
  EXPECT_NE(check_host(p, "attacker.example"), "");
}

TEST(BrowserPolicy, OriginsOtherThanTheServersOwnNeedCors) {
  BrowserPolicy p;
  EXPECT_EQ(check_origin(p, "", "127.0.0.1:8080"), "");  // not from a browser page
  EXPECT_EQ(check_origin(p, "http://127.0.0.1:8080", "127.0.0.1:8080"), "");  // its own page
  const std::string why = check_origin(p, "https://attacker.example", "127.0.0.1:8080");
  EXPECT_NE(why.find("--cors"), std::string::npos) << why;
  EXPECT_NE(check_origin(p, "null", "127.0.0.1:8080"), "");  // a sandboxed frame, a file
  EXPECT_NE(check_origin(p, "http://127.0.0.1:9999", "127.0.0.1:8080"), "");  // another port
  EXPECT_EQ(allow_origin_header(p, "https://app.example", "127.0.0.1:8080"), "");
  p.cors = "https://app.example";
  EXPECT_EQ(check_origin(p, "https://app.example", "127.0.0.1:8080"), "");
  EXPECT_EQ(allow_origin_header(p, "https://app.example", "127.0.0.1:8080"), "https://app.example");
  EXPECT_NE(check_origin(p, "https://other.example", "127.0.0.1:8080"), "");
  p.cors.assign(1, '*');  // not = "*": GCC 12 warns falsely (-Wrestrict) on that
  EXPECT_EQ(check_origin(p, "https://other.example", "127.0.0.1:8080"), "");
  EXPECT_EQ(allow_origin_header(p, "https://other.example", "127.0.0.1:8080"), "*");
}

}  // namespace
}  // namespace ps::server
