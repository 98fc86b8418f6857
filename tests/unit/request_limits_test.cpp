// The header rules checked before a request's body is read (server/request_limits.h).
#include "server/request_limits.h"

#include <gtest/gtest.h>

namespace ps::server {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

TEST(RequestLimits, OrdinaryRequestsPass) {
  EXPECT_EQ(check_request_headers({}).status, 0);
  EXPECT_EQ(
      check_request_headers(
          {{"Host", "127.0.0.1"}, {"Content-Type", "application/json"}, {"Content-Length", "12"}})
          .status,
      0);
  EXPECT_EQ(check_request_headers({{"Transfer-Encoding", "chunked"}}).status, 0);
  EXPECT_EQ(check_request_headers({{"Content-Encoding", "identity"}}).status, 0);
  // The same length twice is one length (RFC 9112 allows a recipient to take it).
  EXPECT_EQ(check_request_headers({{"Content-Length", "5"}, {"content-length", " 5"}}).status, 0);
}

TEST(RequestLimits, AmbiguousFramingIs400) {
  HeaderVerdict v = check_request_headers({{"Content-Length", "5"}, {"Content-Length", "6"}});
  EXPECT_EQ(v.status, 400);
  EXPECT_NE(v.message.find("Content-Length"), std::string::npos) << v.message;
  v = check_request_headers({{"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}});
  EXPECT_EQ(v.status, 400);
  EXPECT_NE(v.message.find("Transfer-Encoding"), std::string::npos) << v.message;
  EXPECT_EQ(check_request_headers({{"Transfer-Encoding", "gzip, chunked"}}).status, 400);
}

TEST(RequestLimits, CompressedBodiesAre415) {
  for (const char* e : {"gzip", "deflate", "br", "GZIP"}) {
    const HeaderVerdict v = check_request_headers({{"Content-Encoding", e}});
    EXPECT_EQ(v.status, 415) << e;
    EXPECT_EQ(v.type, "unsupported_media_type_error");
  }
}

TEST(RequestLimits, TooManyOrTooLargeHeadersAre431) {
  Fields many;
  for (size_t i = 0; i <= kMaxHeaderFields; ++i) many.emplace_back("X-" + std::to_string(i), "1");
  EXPECT_EQ(check_request_headers(many).status, 431);
  many.pop_back();
  EXPECT_EQ(check_request_headers(many).status, 0);
  EXPECT_EQ(check_request_headers({{"X-Big", std::string(kMaxHeaderBytes, 'a')}}).status, 431);
}

}  // namespace
}  // namespace ps::server
