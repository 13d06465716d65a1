// The SQS wire formats and digests of txmq serve (server/sqs/wire.h, server/sqs/digests.h).
#include <map>
#include <sstream>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>
#include <gtest/gtest.h>

#include "server/auth/crypto.h"
#include "server/sqs/digests.h"
#include "server/sqs/wire.h"

namespace txmq::server {
namespace {

using json = nlohmann::json;

json string_attribute(const char* type, const char* value) {
  return {{"DataType", type}, {"StringValue", value}};
}

using Params = std::vector<std::pair<std::string, std::string>>;
namespace pt = boost::property_tree;

// Parses an XML document (throws if it is not well-formed); entities and &#xD; are decoded.
pt::ptree parse_xml(const std::string& xml) {
  std::istringstream in(xml);
  pt::ptree tree;
  pt::read_xml(in, tree);
  return tree;
}

// Digests that open SQS emulators and clients pin in their test suites as what SQS returns
// (moto's send_message tests, a Node SQS client's tests over the attributes of AWS's
// documentation examples, a Go SQS emulator's tests); the inputs are written out here.
TEST(Digests, MessageAttributesMatchWhatSqsReturns) {
  EXPECT_EQ(
      md5_of_message_attributes({{"SellerName", string_attribute("String", "Example Store")}}),
      "cd28f3b68aeee4b2eac9c66f2f694b58");
  EXPECT_EQ(md5_of_message_attributes({{"timestamp", string_attribute("Number", "1493147359900")}}),
            "235c5c510d26fb653d073faed50ae77c");
  EXPECT_EQ(md5_of_message_attributes({{"timestamp", string_attribute("Number", "1493147359901")}}),
            "994258b45346a2cc3f9cbb611aa7af30");
  // Two attributes: sorted by name whatever order they come in.
  EXPECT_EQ(md5_of_message_attributes({{"ordinal", string_attribute("Number", "1")},
                                       {"category", string_attribute("String", "test")}}),
            "d21ae90c49061e927f57df5f5d72be1f");
  EXPECT_EQ(
      md5_of_message_attributes({{"City", string_attribute("String", "Any City")},
                                 {"PostalCode", string_attribute("String", "99065")},
                                 {"PricePerGallon", string_attribute("Number", "1.99")},
                                 {"Region", string_attribute("String", "WA")},
                                 {"SellerName", string_attribute("String", "Example Store")}}),
      "10809b55e3d9b22c17220b7dbaf283ef");
  // A binary value (the bytes 2 3 4) among strings, and a name and value outside ASCII (UTF-8
  // bytes, "\xc3\xb6ther_encodings" sorting after "zzz").
  EXPECT_EQ(md5_of_message_attributes(
                {{"ccc", string_attribute("String", "testjunk")},
                 {"aaa", {{"DataType", "Binary"}, {"BinaryValue", base64_encode("\x02\x03\x04")}}},
                 {"zzz", string_attribute("Number", "0230.01")},
                 {"\xc3\xb6ther_encodings", string_attribute("String", "T\xc3\xbcst")}}),
            "8ae21a7957029ef04146b42aeaa18a22");
  // MD5OfMessageSystemAttributes is the same digest over the AWSTraceHeader attribute.
  EXPECT_EQ(md5_of_message_attributes(
                {{"AWSTraceHeader", string_attribute("String",
                                                     "Root=1-5759e988-bd862e3fe1be46a994272793;"
                                                     "Parent=53995c3f42cd8ad8;Sampled=1")}}),
            "5ae4d5d7636402d80f4eb6d213245a88");
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
  EXPECT_EQ(md5_hex("derp"), "58fd9edd83341c29f1aebba81c31e257");  // MD5OfMessageBody SQS gave
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", std::string("\0\xff\x10", 3)}) {
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
  EXPECT_EQ(invalid_body_character("\xef\xbf\xbf"), 0u);   // U+FFFF
  EXPECT_EQ(invalid_body_character("x\xed\xa0\x80"), 1u);  // a surrogate
  EXPECT_EQ(invalid_body_character("\xc0\xaf"), 0u);       // overlong
  EXPECT_EQ(invalid_body_character("\xe2\x82"), 0u);       // cut short
}

TEST(Wire, XmlEscapesWhatAParserWouldChange) {
  EXPECT_EQ(xml_escape("a&b<c>d\"e'f\r\ng"), "a&amp;b&lt;c&gt;d&quot;e&apos;f&#xD;\ng");
  EXPECT_EQ(xml_escape("\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9");
  // What XML cannot carry becomes U+FFFD, one per character (or stray byte).
  EXPECT_EQ(xml_escape(std::string("a\x01"
                                   "b\0c",
                                   5)),
            "a\xef\xbf\xbd"
            "b\xef\xbf\xbd"
            "c");
  EXPECT_EQ(xml_escape("x\xef\xbf\xbfy\xffz\xed\xa0\x80&"),
            "x\xef\xbf\xbd"
            "y\xef\xbf\xbd"
            "z\xef\xbf\xbd&amp;");
  EXPECT_NO_THROW(parse_xml("<a>" + xml_escape("\x02\x80\xfe") + "</a>"));
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

// Every action's Query parameters exactly as Debian's botocore 1.29 (awscli 2.9, boto3 1.26)
// serializes them, and the JSON 1.0 input they stand for.
TEST(Wire, QueryInputOfEveryAction) {
  struct Case {
    const char* action;
    Params params;
    json expected;
  };
  const std::vector<Case> cases = {
      {"CreateQueue",
       {{"QueueName", "q"},
        {"Attribute.1.Name", "DelaySeconds"},
        {"Attribute.1.Value", "1"},
        {"Attribute.2.Name", "FifoQueue"},
        {"Attribute.2.Value", "false"},
        {"Tag.1.Key", "t"},
        {"Tag.1.Value", "v"}},
       {{"QueueName", "q"},
        {"Attributes", {{"DelaySeconds", "1"}, {"FifoQueue", "false"}}},
        {"tags", {{"t", "v"}}}}},
      {"GetQueueUrl",
       {{"QueueName", "q"}, {"QueueOwnerAWSAccountId", "000000000000"}},
       {{"QueueName", "q"}, {"QueueOwnerAWSAccountId", "000000000000"}}},
      {"ListQueues",
       {{"QueueNamePrefix", "pre"}, {"MaxResults", "5"}, {"NextToken", "t"}},
       {{"QueueNamePrefix", "pre"}, {"MaxResults", 5}, {"NextToken", "t"}}},
      {"DeleteQueue", {{"QueueUrl", "u"}}, {{"QueueUrl", "u"}}},
      {"PurgeQueue", {{"QueueUrl", "u"}}, {{"QueueUrl", "u"}}},
      {"GetQueueAttributes",
       {{"QueueUrl", "u"}, {"AttributeName.1", "All"}, {"AttributeName.2", "QueueArn"}},
       {{"QueueUrl", "u"}, {"AttributeNames", {"All", "QueueArn"}}}},
      {"SetQueueAttributes",
       {{"QueueUrl", "u"}, {"Attribute.1.Name", "DelaySeconds"}, {"Attribute.1.Value", "1"}},
       {{"QueueUrl", "u"}, {"Attributes", {{"DelaySeconds", "1"}}}}},
      {"SendMessage",
       {{"QueueUrl", "u"},
        {"MessageBody", "b"},
        {"DelaySeconds", "3"},
        {"MessageAttribute.1.Name", "k"},
        {"MessageAttribute.1.Value.DataType", "Binary"},
        {"MessageAttribute.1.Value.BinaryValue", "AAE="},
        {"MessageSystemAttribute.1.Name", "AWSTraceHeader"},
        {"MessageSystemAttribute.1.Value.DataType", "String"},
        {"MessageSystemAttribute.1.Value.StringValue", "t"},
        {"MessageDeduplicationId", "d"},
        {"MessageGroupId", "g"}},
       {{"QueueUrl", "u"},
        {"MessageBody", "b"},
        {"DelaySeconds", 3},
        {"MessageAttributes", {{"k", {{"DataType", "Binary"}, {"BinaryValue", "AAE="}}}}},
        {"MessageSystemAttributes",
         {{"AWSTraceHeader", {{"DataType", "String"}, {"StringValue", "t"}}}}},
        {"MessageDeduplicationId", "d"},
        {"MessageGroupId", "g"}}},
      {"ReceiveMessage",
       {{"QueueUrl", "u"},
        {"AttributeName.1", "All"},
        {"MessageAttributeName.1", "x"},
        {"MessageAttributeName.2", "y.*"},
        {"MaxNumberOfMessages", "3"},
        {"VisibilityTimeout", "0"},
        {"WaitTimeSeconds", "20"},
        {"ReceiveRequestAttemptId", "a"}},
       {{"QueueUrl", "u"},
        {"AttributeNames", {"All"}},
        {"MessageAttributeNames", {"x", "y.*"}},
        {"MaxNumberOfMessages", 3},
        {"VisibilityTimeout", 0},
        {"WaitTimeSeconds", 20},
        {"ReceiveRequestAttemptId", "a"}}},
      {"DeleteMessage",
       {{"QueueUrl", "u"}, {"ReceiptHandle", "r"}},
       {{"QueueUrl", "u"}, {"ReceiptHandle", "r"}}},
      {"DeleteMessageBatch",
       {{"QueueUrl", "u"},
        {"DeleteMessageBatchRequestEntry.1.Id", "a"},
        {"DeleteMessageBatchRequestEntry.1.ReceiptHandle", "r"},
        {"DeleteMessageBatchRequestEntry.2.Id", "b"},
        {"DeleteMessageBatchRequestEntry.2.ReceiptHandle", "s"}},
       {{"QueueUrl", "u"},
        {"Entries",
         {{{"Id", "a"}, {"ReceiptHandle", "r"}}, {{"Id", "b"}, {"ReceiptHandle", "s"}}}}}},
      {"ChangeMessageVisibility",
       {{"QueueUrl", "u"}, {"ReceiptHandle", "r"}, {"VisibilityTimeout", "60"}},
       {{"QueueUrl", "u"}, {"ReceiptHandle", "r"}, {"VisibilityTimeout", 60}}},
      {"ChangeMessageVisibilityBatch",
       {{"QueueUrl", "u"},
        {"ChangeMessageVisibilityBatchRequestEntry.1.Id", "a"},
        {"ChangeMessageVisibilityBatchRequestEntry.1.ReceiptHandle", "r"},
        {"ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout", "5"}},
       {{"QueueUrl", "u"},
        {"Entries", {{{"Id", "a"}, {"ReceiptHandle", "r"}, {"VisibilityTimeout", 5}}}}}},
      {"TagQueue",
       {{"QueueUrl", "u"},
        {"Tag.1.Key", "a"},
        {"Tag.1.Value", "1"},
        {"Tag.2.Key", "b"},
        {"Tag.2.Value", ""}},
       {{"QueueUrl", "u"}, {"Tags", {{"a", "1"}, {"b", ""}}}}},
      {"UntagQueue",
       {{"QueueUrl", "u"}, {"TagKey.1", "a"}, {"TagKey.2", "b"}},
       {{"QueueUrl", "u"}, {"TagKeys", {"a", "b"}}}},
      {"ListQueueTags", {{"QueueUrl", "u"}}, {{"QueueUrl", "u"}}},
      {"ListDeadLetterSourceQueues",
       {{"QueueUrl", "u"}, {"MaxResults", "5"}, {"NextToken", "t"}},
       {{"QueueUrl", "u"}, {"MaxResults", 5}, {"NextToken", "t"}}},
  };
  for (const Case& c : cases) {
    Params params = {{"Action", c.action}, {"Version", "2012-11-05"}};
    params.insert(params.end(), c.params.begin(), c.params.end());
    EXPECT_EQ(query_action(params), c.action);
    EXPECT_EQ(query_input(c.action, params), c.expected) << c.action;
  }
}

TEST(Wire, QueryInputRefusals) {
  const auto code_of = [](std::string_view action, const Params& params) {
    try {
      query_input(action, params);
    } catch (const SqsError& e) {
      return e.code;
    }
    return std::string("none");
  };
  EXPECT_EQ(code_of("ReceiveMessage", {{"WaitTimeSeconds", "1.5"}}), "InvalidParameterValue");
  EXPECT_EQ(code_of("ReceiveMessage", {{"WaitTimeSeconds", ""}}), "InvalidParameterValue");
  EXPECT_EQ(code_of("SendMessageBatch", {{"SendMessageBatchRequestEntry.x.Id", "a"}}),
            "InvalidParameterValue");
  EXPECT_EQ(code_of("CreateQueue", {{"Attribute.1.Value", "1"}}), "MissingParameter");
  EXPECT_EQ(code_of("PublishMessage", {}), "InvalidAction");  // not an SQS action
  EXPECT_EQ(code_of("ListQueues", {}), "none");
  try {
    query_action({{"QueueUrl", "u"}});
    ADD_FAILURE() << "no Action accepted";
  } catch (const SqsError& e) {
    EXPECT_EQ(e.code, "MissingAction");
    EXPECT_EQ(e.http_status, 400);
  }
}

// Hostile forms: a name of hundreds of thousands of dots built one tree level per dot (and
// destroyed them recursively: SIGSEGV); a million parameters held in memory.
TEST(Wire, QueryInputIsBoundedInDepthAndCount) {
  std::string dots = "a";
  for (int i = 0; i < 300000; ++i) dots += ".a";
  // Not a parameter of the action: ignored, whatever its shape.
  EXPECT_TRUE(query_input("ListQueues", {{"Action", "ListQueues"}, {dots, "1"}}).empty());
  // The action's own parameter nested past its shapes: refused, without a tree of that depth.
  try {
    query_input("SendMessageBatch", {{"SendMessageBatchRequestEntry." + dots, "1"}});
    ADD_FAILURE() << "a 300,000-part name accepted";
  } catch (const SqsError& e) {
    EXPECT_EQ(e.code, "InvalidParameterValue");
    EXPECT_LT(std::string_view(e.what()).size(), 200u);
  }
  // The deepest name an action has still works.
  const auto input = query_input(
      "SendMessageBatch",
      {{"SendMessageBatchRequestEntry.1.Id", "a"},
       {"SendMessageBatchRequestEntry.1.MessageAttribute.1.Name", "n"},
       {"SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType", "String"},
       {"SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue", "v"}});
  EXPECT_EQ(input["Entries"][0]["MessageAttributes"]["n"]["StringValue"], "v");

  std::string many;
  for (int i = 0; i < 6000; ++i) many += "x" + std::to_string(i) + "=1&";
  try {
    parse_form(many);
    ADD_FAILURE() << "6,000 parameters accepted";
  } catch (const SqsError& e) {
    EXPECT_EQ(e.code, "MalformedQueryString");
  }
  EXPECT_EQ(parse_form("a=1+1%3D2").at(0).second, "1 1=2");
}

TEST(Wire, QueryXmlIsWellFormedAndCarriesTheValues) {
  const std::string body = "a & b <c> \"d\" 'e'\r\n\xc3\xa9\xf0\x9f\x98\x80\t]]>";
  const json received = {
      {"Messages",
       {{{"MessageId", "m1"},
         {"ReceiptHandle", "r1"},
         {"MD5OfBody", md5_hex(body)},
         {"Body", body},
         {"Attributes", {{"ApproximateReceiveCount", "1"}, {"SentTimestamp", "1700000000000"}}},
         {"MessageAttributes",
          {{"color", {{"DataType", "String"}, {"StringValue", "r&d"}}},
           {"raw", {{"DataType", "Binary"}, {"BinaryValue", "AAH/"}}}}}},
        {{"MessageId", "m2"}, {"ReceiptHandle", "r2"}, {"Body", ""}}}}};
  const pt::ptree receive = parse_xml(query_response_xml("ReceiveMessage", received, "req-1"));
  const pt::ptree& result = receive.get_child("ReceiveMessageResponse.ReceiveMessageResult");
  EXPECT_EQ(receive.get<std::string>("ReceiveMessageResponse.<xmlattr>.xmlns"),
            "http://queue.amazonaws.com/doc/2012-11-05/");
  EXPECT_EQ(receive.get<std::string>("ReceiveMessageResponse.ResponseMetadata.RequestId"), "req-1");
  ASSERT_EQ(result.count("Message"), 2u);
  const pt::ptree& first = result.get_child("Message");  // the first of the two
  EXPECT_EQ(first.get<std::string>("Body"), body);       // \r survives the parse
  EXPECT_EQ(first.get<std::string>("MessageId"), "m1");
  EXPECT_EQ(first.count("Attribute"), 2u);
  std::map<std::string, std::string> attributes;
  for (const auto& [name, node] : first) {
    if (name == "Attribute")
      attributes[node.get<std::string>("Name")] = node.get<std::string>("Value");
  }
  EXPECT_EQ(attributes["SentTimestamp"], "1700000000000");
  std::map<std::string, std::pair<std::string, std::string>> message_attributes;
  for (const auto& [name, node] : first) {
    if (name != "MessageAttribute") continue;
    message_attributes[node.get<std::string>("Name")] = {
        node.get<std::string>("Value.DataType"),
        node.get<std::string>("Value.StringValue", node.get<std::string>("Value.BinaryValue", ""))};
  }
  EXPECT_EQ(message_attributes["color"], std::make_pair(std::string("String"), std::string("r&d")));
  EXPECT_EQ(message_attributes["raw"], std::make_pair(std::string("Binary"), std::string("AAH/")));

  const pt::ptree queue = parse_xml(query_response_xml(
      "GetQueueAttributes",
      {{"Attributes", {{"VisibilityTimeout", "30"}, {"Policy", "{\"a\":\"<&>\"}"}}}}, "r"));
  std::map<std::string, std::string> queue_attributes;
  for (const auto& [name, node] :
       queue.get_child("GetQueueAttributesResponse.GetQueueAttributesResult")) {
    ASSERT_EQ(name, "Attribute");
    queue_attributes[node.get<std::string>("Name")] = node.get<std::string>("Value");
  }
  EXPECT_EQ(queue_attributes, (std::map<std::string, std::string>{{"Policy", "{\"a\":\"<&>\"}"},
                                                                  {"VisibilityTimeout", "30"}}));

  const pt::ptree tags = parse_xml(
      query_response_xml("ListQueueTags", {{"Tags", {{"team", "payments"}, {"env", "x&y"}}}}, "r"));
  const pt::ptree& tag = tags.get_child("ListQueueTagsResponse.ListQueueTagsResult.Tag");
  EXPECT_EQ(tag.get<std::string>("Key"), "env");
  EXPECT_EQ(tag.get<std::string>("Value"), "x&y");

  const pt::ptree sources = parse_xml(query_response_xml(
      "ListDeadLetterSourceQueues", {{"queueUrls", {"u1"}}, {"NextToken", "n"}}, "r"));
  EXPECT_EQ(sources.get<std::string>(
                "ListDeadLetterSourceQueuesResponse.ListDeadLetterSourceQueuesResult.QueueUrl"),
            "u1");

  const pt::ptree batch = parse_xml(query_response_xml(
      "DeleteMessageBatch",
      {{"Successful", {{{"Id", "a"}}, {{"Id", "c"}}}},
       {"Failed",
        {{{"Id", "b"}, {"SenderFault", false}, {"Code", "InternalError"}, {"Message", "x"}}}}},
      "r"));
  const pt::ptree& batch_result =
      batch.get_child("DeleteMessageBatchResponse.DeleteMessageBatchResult");
  EXPECT_EQ(batch_result.count("DeleteMessageBatchResultEntry"), 2u);
  EXPECT_EQ(batch_result.get<std::string>("BatchResultErrorEntry.SenderFault"), "false");

  for (const char* action : {"DeleteQueue", "DeleteMessage", "PurgeQueue", "SetQueueAttributes",
                             "ChangeMessageVisibility", "TagQueue", "UntagQueue"}) {
    const pt::ptree empty = parse_xml(query_response_xml(action, json::object(), "r"));
    const pt::ptree& response = empty.get_child(std::string(action) + "Response");
    EXPECT_EQ(response.get<std::string>("ResponseMetadata.RequestId"), "r") << action;
    EXPECT_EQ(response.count(std::string(action) + "Result"), 0u) << action;
  }

  const pt::ptree error = parse_xml(query_error_xml(
      SqsError::of("InvalidParameterValue", "Value <x> & \"y\" is invalid."), "req-2"));
  EXPECT_EQ(error.get<std::string>("ErrorResponse.Error.Type"), "Sender");
  EXPECT_EQ(error.get<std::string>("ErrorResponse.Error.Code"), "InvalidParameterValue");
  EXPECT_EQ(error.get<std::string>("ErrorResponse.Error.Message"), "Value <x> & \"y\" is invalid.");
  EXPECT_EQ(error.get<std::string>("ErrorResponse.RequestId"), "req-2");
  // The parser does refuse what is not well-formed.
  EXPECT_THROW(parse_xml("<a><b></a>"), pt::xml_parser_error);
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

  const json batch = {
      {"Successful", {{{"Id", "a"}, {"MessageId", "m"}}}},
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

// Each error of SQS's model: its JSON name, the Query code and HTTP status of its awsQueryError
// trait (botocore's Query model agrees where it has the shape), but ReceiptHandleIsInvalid: the
// model says 404, SQS answers 400.
TEST(Wire, ErrorCodesAndStatusesFollowTheModel) {
  struct Expected {
    const char* code;
    const char* query_code;
    int status;
  };
  for (const Expected& e : std::vector<Expected>{
           {"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", 400},
           {"QueueNameExists", "QueueAlreadyExists", 400},
           {"QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently", 400},
           {"PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", 403},
           {"BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400},
           {"EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400},
           {"InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", 400},
           {"BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400},
           {"TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            400},
           {"MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", 400},
           {"UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", 400},
           {"ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 400},
           {"OverLimit", "OverLimit", 403},
           {"InvalidAddress", "InvalidAddress", 404},
           {"InvalidSecurity", "InvalidSecurity", 403},
           {"RequestThrottled", "RequestThrottled", 403},
           {"KmsOptInRequired", "KMS.OptInRequired", 403},
           {"InvalidAttributeName", "InvalidAttributeName", 400},
           {"InvalidAttributeValue", "InvalidAttributeValue", 400},
           {"InvalidMessageContents", "InvalidMessageContents", 400},
           {"MalformedQueryString", "MalformedQueryString", 404},
           {"InvalidClientTokenId", "InvalidClientTokenId", 403},
           {"MissingAuthenticationToken", "MissingAuthenticationToken", 403},
       }) {
    const SqsError error = SqsError::of(e.code, "m");
    EXPECT_EQ(error.query_code, e.query_code) << e.code;
    EXPECT_EQ(error.http_status, e.status) << e.code;
    EXPECT_TRUE(error.sender_fault) << e.code;
    EXPECT_EQ(json_error(error).query_error_header, std::string(e.query_code) + ";Sender");
    EXPECT_EQ(SqsError::of(e.query_code, "m").code, e.code);  // found by its Query code too
  }
}

TEST(Wire, ErrorsInEachProtocolsShape) {
  const SqsError missing = SqsError::of("QueueDoesNotExist", "The specified queue does not exist.");
  EXPECT_EQ(missing.http_status, 400);
  EXPECT_EQ(query_error_xml(missing, "r"),
            "<?xml version=\"1.0\"?><ErrorResponse><Error><Type>Sender</Type>"
            "<Code>AWS.SimpleQueueService.NonExistentQueue</Code><Message>The specified queue "
            "does not exist for this wsdl version.</Message><Detail/></Error>"
            "<RequestId>r</RequestId></ErrorResponse>");
  const JsonErrorReply j = json_error(missing);
  EXPECT_EQ(json::parse(j.body)["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
  EXPECT_EQ(json::parse(j.body)["message"], "The specified queue does not exist.");
  // SQS's JSON type names of these two (the header keeps the Query code).
  EXPECT_EQ(json::parse(json_error(SqsError::of("InvalidParameterValue", "m")).body)["__type"],
            "com.amazonaws.sqs#InvalidParameterValueException");
  EXPECT_EQ(json::parse(json_error(SqsError::of("MissingParameter", "m")).body)["__type"],
            "com.amazonaws.sqs#MissingRequiredParameterException");
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
