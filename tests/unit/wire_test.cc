// The SQS wire formats and digests of txmq serve (server/wire.h, server/digests.h).
#include <gtest/gtest.h>

#include "server/digests.h"
#include "server/wire.h"

namespace txmq::server {
namespace {

using json = nlohmann::json;

json string_attribute(const char* type, const char* value) {
  return {{"DataType", type}, {"StringValue", value}};
}

// Digests that SQS itself returned, as published with open SQS implementations' tests and AWS's
// documentation examples; the inputs are written out here.
TEST(Digests, MessageAttributesMatchWhatSqsReturns) {
  EXPECT_EQ(md5_of_message_attributes({{"SellerName", string_attribute("String", "Example Store")}}),
            "cd28f3b68aeee4b2eac9c66f2f694b58");
  EXPECT_EQ(md5_of_message_attributes({{"timestamp", string_attribute("Number", "1493147359900")}}),
            "235c5c510d26fb653d073faed50ae77c");
  // Two attributes: sorted by name whatever order they come in.
  EXPECT_EQ(md5_of_message_attributes({{"ordinal", string_attribute("Number", "1")},
                                       {"category", string_attribute("String", "test")}}),
            "d21ae90c49061e927f57df5f5d72be1f");
}

TEST(Digests, BinaryAttributesAreHashedDecodedWithTheirOwnMarker) {
  const json as_binary = {{"b", {{"DataType", "Binary"}, {"BinaryValue", base64_encode("abc")}}}};
  const json as_string = {{"b", string_attribute("Binary", "abc")}};
  // Same bytes, but a binary value carries the marker 2 where a string carries 1.
  EXPECT_NE(md5_of_message_attributes(as_binary), md5_of_message_attributes(as_string));
  // The encoding written out: name, type, marker, value, lengths as 4 bytes big-endian.
  const std::string bytes = std::string("\0\0\0\1b", 5) + std::string("\0\0\0\6Binary", 10) +
                            std::string("\2", 1) + std::string("\0\0\0\3abc", 7);
  EXPECT_EQ(md5_of_message_attributes(as_binary), md5_hex(bytes));
}

TEST(Digests, BodyDigestsAndBase64) {
  EXPECT_EQ(md5_hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5_hex("hello"), "5d41402abc4b2a76b9719d911017c592");
  EXPECT_EQ(sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", std::string("\0\xff\x10", 3)}) {
    EXPECT_EQ(base64_decode(base64_encode(s)), s);
  }
  EXPECT_EQ(base64_encode("ab"), "YWI=");
  EXPECT_FALSE(base64_decode("YW=I").has_value());
  EXPECT_FALSE(base64_decode("YWI").has_value());
  EXPECT_FALSE(base64_decode("Y!I=").has_value());
}

TEST(Digests, BodyCharactersFollowSqsRule) {
  EXPECT_FALSE(invalid_body_character("tab\tline\ncr\r \xc3\xa9 \xf0\x9f\x98\x80").has_value());
  EXPECT_EQ(invalid_body_character(std::string("a\0b", 3)), 1u);
  EXPECT_EQ(invalid_body_character("ab\x01"), 2u);
  EXPECT_EQ(invalid_body_character("\xef\xbf\xbf"), 0u);      // U+FFFF
  EXPECT_EQ(invalid_body_character("x\xed\xa0\x80"), 1u);     // a surrogate
  EXPECT_EQ(invalid_body_character("\xc0\xaf"), 0u);          // overlong
  EXPECT_EQ(invalid_body_character("\xe2\x82"), 0u);          // cut short
}

TEST(Wire, XmlEscapesWhatAParserWouldChange) {
  EXPECT_EQ(xml_escape("a&b<c>d\"e'f\r\ng"), "a&amp;b&lt;c&gt;d&quot;e&apos;f&#xD;\ng");
  EXPECT_EQ(xml_escape("\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9");
}

TEST(Wire, FormDecoding) {
  auto p = parse_form("Action=SendMessage&MessageBody=a+b%26c%3D%0D&Empty=&Flag");
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[1].second, "a b&c=\r");
  EXPECT_EQ(p[2].second, "");
  EXPECT_EQ(p[3].first, "Flag");
  EXPECT_THROW(parse_form("a=%4"), SqsError);
  EXPECT_THROW(parse_form("a=%zz"), SqsError);
}

TEST(Wire, QueryInputBecomesTheJsonShape) {
  const std::vector<std::pair<std::string, std::string>> params = {
      {"Action", "SendMessageBatch"},
      {"QueueUrl", "http://h/000000000000/q"},
      {"SendMessageBatchRequestEntry.2.Id", "second"},
      {"SendMessageBatchRequestEntry.2.MessageBody", "two"},
      {"SendMessageBatchRequestEntry.1.Id", "first"},
      {"SendMessageBatchRequestEntry.1.MessageBody", "one"},
      {"SendMessageBatchRequestEntry.1.DelaySeconds", "5"},
      {"SendMessageBatchRequestEntry.1.MessageAttribute.1.Name", "color"},
      {"SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType", "String"},
      {"SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue", "red"},
      {"SendMessageBatchRequestEntry.1.MessageAttribute.2.Name", "raw"},
      {"SendMessageBatchRequestEntry.1.MessageAttribute.2.Value.DataType", "Binary"},
      {"SendMessageBatchRequestEntry.1.MessageAttribute.2.Value.BinaryValue", "AAE="},
  };
  EXPECT_EQ(query_action(params), "SendMessageBatch");
  const json in = query_input("SendMessageBatch", params);
  ASSERT_EQ(in["Entries"].size(), 2u);
  EXPECT_EQ(in["Entries"][0]["Id"], "first");  // by index, not by arrival
  EXPECT_EQ(in["Entries"][0]["DelaySeconds"], 5);
  EXPECT_EQ(in["Entries"][0]["MessageAttributes"]["color"]["StringValue"], "red");
  EXPECT_EQ(in["Entries"][0]["MessageAttributes"]["raw"]["BinaryValue"], "AAE=");
  EXPECT_EQ(in["Entries"][1]["MessageBody"], "two");

  const json create = query_input("CreateQueue", {{"QueueName", "q"},
                                                  {"Attribute.1.Name", "VisibilityTimeout"},
                                                  {"Attribute.1.Value", "60"},
                                                  {"Tag.1.Key", "team"},
                                                  {"Tag.1.Value", "payments"}});
  EXPECT_EQ(create["Attributes"]["VisibilityTimeout"], "60");
  EXPECT_EQ(create["tags"]["team"], "payments");

  const json receive = query_input("ReceiveMessage", {{"QueueUrl", "u"},
                                                      {"AttributeName.1", "All"},
                                                      {"MessageAttributeName.1", "color"},
                                                      {"MaxNumberOfMessages", "10"}});
  EXPECT_EQ(receive["AttributeNames"], json::array({"All"}));
  EXPECT_EQ(receive["MaxNumberOfMessages"], 10);
  EXPECT_THROW(query_input("ReceiveMessage", {{"MaxNumberOfMessages", "ten"}}), SqsError);
  EXPECT_THROW(query_input("NoSuchAction", {}), SqsError);
  EXPECT_THROW(query_action({{"QueueUrl", "u"}}), SqsError);
}

TEST(Wire, JsonOutputBecomesQueryXml) {
  const json out = {
      {"Messages",
       {{{"MessageId", "m1"},
         {"ReceiptHandle", "1.abc"},
         {"Body", "a & b <c> \"d\"\r"},
         {"Attributes", {{"ApproximateReceiveCount", "1"}}},
         {"MessageAttributes", {{"color", {{"DataType", "String"}, {"StringValue", "red"}}}}}}}}};
  const std::string xml = query_response_xml("ReceiveMessage", out, "req-1");
  EXPECT_NE(xml.find("<ReceiveMessageResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">"
                     "<ReceiveMessageResult><Message>"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<Body>a &amp; b &lt;c&gt; &quot;d&quot;&#xD;</Body>"), std::string::npos);
  EXPECT_NE(xml.find("<Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>"),
            std::string::npos);
  EXPECT_NE(xml.find("<MessageAttribute><Name>color</Name><Value><StringValue>red</StringValue>"
                     "<DataType>String</DataType></Value></MessageAttribute>"),
            std::string::npos);
  EXPECT_NE(xml.find("<ResponseMetadata><RequestId>req-1</RequestId></ResponseMetadata>"),
            std::string::npos);

  const json batch = {{"Successful", {{{"Id", "a"}, {"MessageId", "m"}}}},
                      {"Failed", {{{"Id", "b"}, {"SenderFault", true}, {"Code", "X"}, {"Message", "y"}}}}};
  const std::string b = query_response_xml("SendMessageBatch", batch, "r");
  EXPECT_NE(b.find("<SendMessageBatchResultEntry><Id>a</Id><MessageId>m</MessageId>"
                   "</SendMessageBatchResultEntry>"),
            std::string::npos)
      << b;
  EXPECT_NE(b.find("<BatchResultErrorEntry><Code>X</Code><Id>b</Id><Message>y</Message>"
                   "<SenderFault>true</SenderFault></BatchResultErrorEntry>"),
            std::string::npos)
      << b;
  const std::string list = query_response_xml("ListQueues", {{"QueueUrls", {"u1", "u2"}}}, "r");
  EXPECT_NE(list.find("<ListQueuesResult><QueueUrl>u1</QueueUrl><QueueUrl>u2</QueueUrl>"
                      "</ListQueuesResult>"),
            std::string::npos);
  // No Result element for actions without output.
  const std::string del = query_response_xml("DeleteQueue", json::object(), "r");
  EXPECT_EQ(del.find("DeleteQueueResult"), std::string::npos);
  EXPECT_NE(del.find("<DeleteQueueResponse"), std::string::npos);
}

TEST(Wire, ErrorsInEachProtocolsShape) {
  const SqsError missing = SqsError::of("QueueDoesNotExist", "The specified queue does not exist.");
  EXPECT_EQ(missing.http_status, 400);
  EXPECT_EQ(query_error_xml(missing, "r"),
            "<?xml version=\"1.0\"?><ErrorResponse><Error><Type>Sender</Type>"
            "<Code>AWS.SimpleQueueService.NonExistentQueue</Code><Message>The specified queue "
            "does not exist.</Message><Detail/></Error><RequestId>r</RequestId></ErrorResponse>");
  const JsonErrorReply j = json_error(missing);
  EXPECT_EQ(json::parse(j.body)["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
  EXPECT_EQ(j.query_error_header, "AWS.SimpleQueueService.NonExistentQueue;Sender");
  // Known by either name; the Query code of QueueNameExists is QueueAlreadyExists.
  EXPECT_EQ(SqsError::of("QueueAlreadyExists", "m").code, "QueueNameExists");
  EXPECT_EQ(SqsError::of("SignatureDoesNotMatch", "m").http_status, 403);
  EXPECT_EQ(SqsError::of("RequestExpired", "m").http_status, 400);
  const SqsError internal = SqsError::of("InternalError", "x");
  EXPECT_EQ(internal.http_status, 500);
  EXPECT_NE(query_error_xml(internal, "r").find("<Type>Receiver</Type>"), std::string::npos);
  EXPECT_EQ(json_error(SqsError::of("InvalidParameterValue", "bad & <x>")).query_error_header,
            "InvalidParameterValue;Sender");
  EXPECT_NE(query_error_xml(SqsError::of("InvalidParameterValue", "bad & <x>"), "r")
                .find("bad &amp; &lt;x&gt;"),
            std::string::npos);
}

}  // namespace
}  // namespace txmq::server
