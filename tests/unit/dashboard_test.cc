// The dashboard's pure pieces (server/web/dashboard.h) and its guard (server/auth/web_guard.h):
// Basic auth, the Host check, payload previews, and the embedded files. No server, no database.
#include "server/auth/web_guard.h"
#include "server/web/dashboard.h"
#include "util/codec.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <string_view>

namespace txmq::server {
namespace {

using web_guard::basic_auth_ok;
using web_guard::loopback_host;
using dashboard_internal::preview;

std::string base64(std::string_view in) { return util::base64_encode(in); }

TEST(Dashboard, BasicAuthNeedsAKeyOfTheFileWithItsSecret) {
  const Credentials keys = Credentials::parse(
      "AKIDONE secret-one\nAKIDTWO se:cr:et\n", "test");
  EXPECT_TRUE(basic_auth_ok("Basic " + base64("AKIDONE:secret-one"), keys));
  EXPECT_TRUE(basic_auth_ok("basic   " + base64("AKIDONE:secret-one") + " ", keys));
  EXPECT_TRUE(basic_auth_ok("BASIC " + base64("AKIDTWO:se:cr:et"), keys));  // colons in secrets
  EXPECT_FALSE(basic_auth_ok("Basic " + base64("AKIDONE:secret-on"), keys));
  EXPECT_FALSE(basic_auth_ok("Basic " + base64("AKIDONE:secret-one!"), keys));
  EXPECT_FALSE(basic_auth_ok("Basic " + base64("AKIDONE:secret-two"), keys));
  EXPECT_FALSE(basic_auth_ok("Basic " + base64("AKIDTWO:secret-one"), keys));  // another's secret
  EXPECT_FALSE(basic_auth_ok("Basic " + base64("AKIDNONE:secret-one"), keys));
  EXPECT_FALSE(basic_auth_ok("Basic " + base64("AKIDONE"), keys));  // no colon
  EXPECT_FALSE(basic_auth_ok("Basic " + base64("AKIDONE:"), keys));
  EXPECT_FALSE(basic_auth_ok("Basic " + base64(":secret-one"), keys));
  EXPECT_FALSE(basic_auth_ok("Basic !!!", keys));
  EXPECT_FALSE(basic_auth_ok("Bearer " + base64("AKIDONE:secret-one"), keys));
  EXPECT_FALSE(basic_auth_ok("", keys));
  EXPECT_FALSE(basic_auth_ok("Basic", keys));
}

TEST(Dashboard, LoopbackHosts) {
  for (const char* host : {"localhost", "localhost:9324", "127.0.0.1", "127.0.0.1:9324",
                           "127.1.2.3:80", "[::1]", "[::1]:9324"}) {
    EXPECT_TRUE(loopback_host(host)) << host;
  }
  for (const char* host : {"", "example.com", "example.com:9324", "localhost.example.com",
                           "127.0.0.1.evil.example", "127.0.0.1x", "10.0.0.1:9324", "[::2]:1",
                           "[::1", "0.0.0.0:9324"}) {
    EXPECT_FALSE(loopback_host(host)) << host;
  }
}

TEST(Dashboard, PreviewsTextWholeCharactersAndBinaryInHex) {
  auto p = preview("hello", 300);
  EXPECT_EQ(p.kind, "text");
  EXPECT_EQ(p.text, "hello");
  EXPECT_FALSE(p.truncated);

  // Cut at a character boundary: "é" is 2 bytes, the limit falls inside the third one.
  p = preview("ééé", 5);
  EXPECT_EQ(p.kind, "text");
  EXPECT_EQ(p.text, "éé");
  EXPECT_TRUE(p.truncated);

  // Markup stays as it is: the page puts it on screen as text.
  p = preview("<img src=x onerror=alert(1)>", 300);
  EXPECT_EQ(p.text, "<img src=x onerror=alert(1)>");

  p = preview(std::string("\x00\xff\x10", 3), 300);
  EXPECT_EQ(p.kind, "hex");
  EXPECT_EQ(p.text, "00 ff 10");
  EXPECT_FALSE(p.truncated);

  // Invalid UTF-8 past the limit still makes it binary; overlong forms and surrogates too.
  p = preview(std::string(400, 'a') + "\xc3", 300);
  EXPECT_EQ(p.kind, "hex");
  EXPECT_TRUE(p.truncated);
  EXPECT_EQ(preview("\xc0\xaf", 300).kind, "hex");
  EXPECT_EQ(preview("\xed\xa0\x80", 300).kind, "hex");
  EXPECT_EQ(preview("\xf0\x9f\x98\x80", 300).kind, "text");  // an emoji
  EXPECT_EQ(preview("", 300).kind, "text");

  // The first bytes of a longer payload (the dead-letter view reads only those): one that ends
  // inside a character is still text, and truncated whatever its length.
  p = preview(std::string(299, 'a') + "\xe2\x82\xac\xe2\x82", 300, /*cut=*/true);
  EXPECT_EQ(p.kind, "text");
  EXPECT_EQ(p.text, std::string(299, 'a'));
  EXPECT_TRUE(p.truncated);
  EXPECT_TRUE(preview("short", 300, /*cut=*/true).truncated);
  EXPECT_EQ(preview(std::string(299, 'a') + "\xff", 300, /*cut=*/true).kind, "hex");
}

TEST(Dashboard, EmbedsItsFiles) {
  std::map<std::string_view, std::string_view> files;
  for (std::size_t i = 0; i < kDashboardAssetCount; ++i) {
    files[kDashboardAssets[i].path] = kDashboardAssets[i].body;
    EXPECT_FALSE(kDashboardAssets[i].body.empty()) << kDashboardAssets[i].path;
  }
  ASSERT_TRUE(files.count("/"));
  ASSERT_TRUE(files.count("/ui/app.js"));
  ASSERT_TRUE(files.count("/ui/style.css"));
  EXPECT_TRUE(files["/"].starts_with("<!doctype html>"));
  EXPECT_NE(files["/"].find("/ui/app.js"), std::string_view::npos);
  // Nothing from other sites (the SVG namespace is a name, not a download).
  for (const auto& [path, body] : files) {
    for (std::size_t at = body.find("http"); at != std::string_view::npos;
         at = body.find("http", at + 1)) {
      EXPECT_TRUE(body.substr(at).starts_with("http://www.w3.org/2000/svg")) << path;
    }
    // The page never parses data as HTML.
    EXPECT_EQ(body.find("innerHTML"), std::string_view::npos) << path;
  }
}

}  // namespace
}  // namespace txmq::server
