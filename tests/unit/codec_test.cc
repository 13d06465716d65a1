// The shared codecs (src/util/codec.h) and random bytes (src/util/random.h), with the edge cases
// where their callers' rules differ: '+' in a query, a stray '%', base64 padding, overlong UTF-8
// and surrogates, and the escaping of backslashes, controls and non-ASCII bytes.
#include "util/codec.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "util/random.h"

namespace txmq::util {
namespace {

using namespace std::string_literals;

TEST(CodecTest, HexEncodesLowerCase) {
  EXPECT_EQ(hex_encode(""), "");
  EXPECT_EQ(hex_encode("\x00\x0f\xab\xff"s), "000fabff");
  EXPECT_EQ(hex_encode("AZ"), "415a");
}

TEST(CodecTest, HexDigitsOfEitherCase) {
  EXPECT_EQ(hex_digit_value('0'), 0);
  EXPECT_EQ(hex_digit_value('9'), 9);
  EXPECT_EQ(hex_digit_value('a'), 10);
  EXPECT_EQ(hex_digit_value('F'), 15);
  for (char c : "gG/:@`\x80 "s) EXPECT_EQ(hex_digit_value(c), -1) << int(c);
}

TEST(CodecTest, PercentEncodeIsRfc3986WithUpperCaseHex) {
  EXPECT_EQ(percent_encode("AZaz09-._~", Slash::kEncoded), "AZaz09-._~");
  EXPECT_EQ(percent_encode("a b+c/d=\xff", Slash::kEncoded), "a%20b%2Bc%2Fd%3D%FF");
  EXPECT_EQ(percent_encode("/a b/", Slash::kKept), "/a%20b/");
  EXPECT_EQ(percent_encode("\0"s, Slash::kEncoded), "%00");
  std::string out = "x=";
  append_percent_encoded(out, "*", Slash::kKept);
  EXPECT_EQ(out, "x=%2A");
}

TEST(CodecTest, PercentDecodeReadsEitherCaseOfHex) {
  EXPECT_EQ(percent_decode("%41%6a%6A%2f", PlusSign::kLiteral, BadEscape::kRefuse), "Ajj/");
  EXPECT_EQ(percent_decode("%00", PlusSign::kLiteral, BadEscape::kRefuse), "\0"s);
  EXPECT_EQ(percent_decode("", PlusSign::kSpace, BadEscape::kRefuse), "");
}

TEST(CodecTest, PercentDecodePlusIsASpaceOnlyWhenAsked) {
  EXPECT_EQ(percent_decode("a+b%2B", PlusSign::kLiteral, BadEscape::kRefuse), "a+b+");
  EXPECT_EQ(percent_decode("a+b%2B", PlusSign::kSpace, BadEscape::kRefuse), "a b+");
}

TEST(CodecTest, PercentDecodeBadEscapesRefusedOrKept) {
  for (std::string_view bad : {"%", "%4", "a%4", "%zz", "%4g", "%g4", "100%"}) {
    EXPECT_FALSE(percent_decode(bad, PlusSign::kLiteral, BadEscape::kRefuse)) << bad;
    EXPECT_EQ(percent_decode(bad, PlusSign::kLiteral, BadEscape::kKeep), bad) << bad;
  }
  // A kept '%' does not swallow what follows: "%+" is a '%' and then a space.
  EXPECT_EQ(percent_decode("%+%41", PlusSign::kSpace, BadEscape::kKeep), "% A");
  EXPECT_EQ(percent_decode("%%41", PlusSign::kLiteral, BadEscape::kKeep), "%A");
}

TEST(CodecTest, FormDecodeSplitsPairs) {
  const std::optional<FormPairs> p =
      form_decode("Action=Send&Body=a+b%26c%3D%0D&Empty=&Flag&&=v", BadEscape::kRefuse);
  ASSERT_TRUE(p);
  ASSERT_EQ(p->size(), 5u);
  EXPECT_EQ((*p)[0], std::pair("Action"s, "Send"s));
  EXPECT_EQ((*p)[1], std::pair("Body"s, "a b&c=\r"s));
  EXPECT_EQ((*p)[2], std::pair("Empty"s, ""s));
  EXPECT_EQ((*p)[3], std::pair("Flag"s, ""s));
  EXPECT_EQ((*p)[4], std::pair(""s, "v"s));
  EXPECT_EQ(form_decode("", BadEscape::kRefuse)->size(), 0u);
  EXPECT_EQ(form_decode("&&", BadEscape::kRefuse)->size(), 0u);
  EXPECT_EQ(form_decode("a=b=c", BadEscape::kRefuse)->at(0).second, "b=c");
}

TEST(CodecTest, FormDecodeBadEscapes) {
  EXPECT_FALSE(form_decode("a=1&b=%4", BadEscape::kRefuse));
  EXPECT_FALSE(form_decode("%zz=1", BadEscape::kRefuse));
  const std::optional<FormPairs> kept = form_decode("a=100%&%zz=1", BadEscape::kKeep);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->at(0).second, "100%");
  EXPECT_EQ(kept->at(1).first, "%zz");
}

TEST(CodecTest, FormDecodeIsBoundedInPairs) {
  FormFault fault = FormFault::kNone;
  const std::optional<FormPairs> two = form_decode("a=1&&b=2", BadEscape::kRefuse, 2, fault);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->size(), 2u);
  EXPECT_EQ(fault, FormFault::kNone);
  // Refused as soon as the text goes on past the bound, before the rest is decoded.
  EXPECT_FALSE(form_decode("a=1&b=2&%zz", BadEscape::kRefuse, 2, fault));
  EXPECT_EQ(fault, FormFault::kTooManyPairs);
  EXPECT_TRUE(form_decode("a=1&b=2&", BadEscape::kRefuse, 2, fault));  // nothing after the last &
  EXPECT_FALSE(form_decode("a=1&b=2&&", BadEscape::kRefuse, 2, fault));
  EXPECT_EQ(fault, FormFault::kTooManyPairs);
  EXPECT_FALSE(form_decode("a=%4&b=2&c=3", BadEscape::kRefuse, 2, fault));
  EXPECT_EQ(fault, FormFault::kBadEscape);
}

TEST(CodecTest, Base64TestVectors) {
  // RFC 4648, section 10, and bytes outside ASCII.
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
      {"\0\xff\xfe"s, "AP/+"},
  };
  for (const auto& [bytes, text] : vectors) {
    EXPECT_EQ(base64_encode(bytes), text) << text;
    EXPECT_EQ(base64_decode(text), bytes) << text;
  }
}

TEST(CodecTest, Base64RoundTrips) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (std::size_t n = 0; n <= all.size(); n += 37) {
    const std::string bytes = all.substr(0, n);
    EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes) << n;
    EXPECT_EQ(base64_decode(base64_encode(bytes), Base64Padding::kOptional), bytes) << n;
  }
}

TEST(CodecTest, Base64ExactPadding) {
  EXPECT_EQ(base64_decode("Zg=="), "f");
  EXPECT_EQ(base64_decode("Zm8="), "fo");
  EXPECT_EQ(base64_decode(""), "");
  EXPECT_FALSE(base64_decode("Zg"));  // padding missing
  EXPECT_FALSE(base64_decode("Zm8"));
  EXPECT_FALSE(base64_decode("Z==="));  // three '='
  EXPECT_FALSE(base64_decode("===="));
  EXPECT_FALSE(base64_decode("Zg==Zg=="));  // padding inside
  EXPECT_FALSE(base64_decode("YW=I"));
  EXPECT_FALSE(base64_decode("Zg==="));
  EXPECT_FALSE(base64_decode("Y!I="));  // outside the alphabet
  EXPECT_FALSE(base64_decode("Zm9v\n"));
  EXPECT_FALSE(base64_decode("Zm-_"));  // the URL-safe alphabet is not this one
}

TEST(CodecTest, Base64OptionalPadding) {
  const auto lenient = [](std::string_view text) {
    return base64_decode(text, Base64Padding::kOptional);
  };
  EXPECT_EQ(lenient("Zg"), "f");
  EXPECT_EQ(lenient("Zm8"), "fo");
  EXPECT_EQ(lenient("Zg=="), "f");
  EXPECT_EQ(lenient("Zg====="), "f");  // any number of trailing '='
  EXPECT_EQ(lenient("Z"), "");         // six bits: no byte
  EXPECT_EQ(lenient("===="), "");
  EXPECT_FALSE(lenient("YW=I"));  // '=' only at the end
  EXPECT_FALSE(lenient("Zg== "));
  EXPECT_FALSE(lenient("Y!I="));
}

TEST(CodecTest, Utf8Characters) {
  EXPECT_FALSE(utf8_char(""));
  const auto ascii = utf8_char("A!");
  ASSERT_TRUE(ascii);
  EXPECT_EQ(ascii->code_point, U'A');
  EXPECT_EQ(ascii->size, 1u);
  EXPECT_EQ(utf8_char("\0"s)->code_point, 0u);
  EXPECT_EQ(utf8_char("\xc3\xa9")->code_point, 0xe9u);
  EXPECT_EQ(utf8_char("\xe2\x82\xac")->code_point, 0x20acu);
  EXPECT_EQ(utf8_char("\xf0\x9f\x98\x80")->size, 4u);
  EXPECT_EQ(utf8_char("\xf4\x8f\xbf\xbf")->code_point, 0x10ffffu);  // the last one
  EXPECT_EQ(utf8_char("\xef\xbf\xbf")->code_point, 0xffffu);        // UTF-8, if not SQS's
}

TEST(CodecTest, Utf8Invalid) {
  for (std::string_view bad : {
           "\x80",                                                      // a stray continuation byte
           "\xff", "\xf8\x88\x80\x80\x80",                              // no such lead byte
           "\xc3", "\xe2\x82",                                          // cut short
           "\xc3(",                                                     // not a continuation
           "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf",  // overlong
           "\xed\xa0\x80", "\xed\xbf\xbf",                              // surrogates
           "\xf4\x90\x80\x80", "\xf7\xbf\xbf\xbf",                      // past U+10FFFF
       }) {
    EXPECT_FALSE(utf8_char(bad)) << hex_encode(bad);
    EXPECT_FALSE(is_valid_utf8(bad)) << hex_encode(bad);
  }
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf \xee\x80\x80"));
  EXPECT_TRUE(is_valid_utf8("a\0b"s));
  EXPECT_FALSE(is_valid_utf8("ok\xc3"));
}

TEST(CodecTest, PrintableEscapesWhatIsNotPrintableAscii) {
  EXPECT_EQ(printable("plain text ~"), "plain text ~");
  EXPECT_EQ(printable("a\0b\n\x7f\xc3\xa9"s), "a\\x00b\\x0a\\x7f\\xc3\\xa9");
  EXPECT_EQ(printable("back\\slash"), "back\\slash");  // by default kept
  EXPECT_EQ(printable("back\\slash", 64, {.backslash = true}), "back\\\\slash");
}

TEST(CodecTest, PrintableCutsAfterMax) {
  EXPECT_EQ(printable(std::string(64, 'x')), std::string(64, 'x'));
  EXPECT_EQ(printable(std::string(65, 'x')), std::string(64, 'x') + "... (65 bytes)");
  EXPECT_EQ(printable("abcdef", 3), "abc... (6 bytes)");
  EXPECT_EQ(printable("\x01\x02", 1), "\\x01... (2 bytes)");
  EXPECT_EQ(printable("", 0), "");
}

TEST(CodecTest, PrintableOneLineVariant) {
  const Escaping line{.backslash = true, .named_controls = true, .non_ascii_kept = true};
  EXPECT_EQ(printable("a\nb\rc\td\\e\x01\x7f caf\xc3\xa9", std::string_view::npos, line),
            "a\\nb\\rc\\td\\\\e\\x01\\x7f caf\xc3\xa9");
  EXPECT_EQ(printable("\n", std::string_view::npos, {.named_controls = true}), "\\n");
  EXPECT_EQ(printable("\xff", std::string_view::npos, {.non_ascii_kept = true}), "\xff");
}

TEST(RandomTest, FillsAndDiffers) {
  EXPECT_EQ(random_bytes(0), "");
  const std::string a = random_bytes(32), b = random_bytes(32);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);  // 2^-256
  std::uint64_t x = 0, y = 0;
  ASSERT_TRUE(fill_random(&x, sizeof(x)));
  ASSERT_TRUE(fill_random(&y, sizeof(y)));
  EXPECT_NE(x, y);
  // Larger than one getrandom call may return at once (it may stop at 32 MiB - 1).
  EXPECT_EQ(random_bytes(1 << 16).size(), 1u << 16);
}

}  // namespace
}  // namespace txmq::util
