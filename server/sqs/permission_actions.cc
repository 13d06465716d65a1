// The SQS actions on a queue's access policy: AddPermission and RemovePermission. They edit the
// queue's Policy attribute as SQS does (one statement per label, its Sid); txmq serve stores
// and returns the policy but does not enforce it (docs/sqs.md, "Permissions").
#include <algorithm>

#include <fmt/format.h>

#include "server/sqs/inputs.h"
#include "server/sqs/service.h"
#include "server/sqs/service_call.h"
#include "server/sqs/wire.h"

namespace txmq::server {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

// SQS's limits: actions per statement, and its policy quotas (statements, principals, bytes).
constexpr std::size_t kMaxActions = 7;
constexpr std::size_t kMaxStatements = 20;
constexpr std::size_t kMaxPrincipals = 50;
constexpr std::size_t kMaxPolicyBytes = QueueCatalog::kMaxPolicyBytes;

// The actions a queue's owner may share (AddPermission's ActionName). The batch actions go with
// their single ones; the queue's own administration stays the owner's.
constexpr std::string_view kShareable[] = {
    "ChangeMessageVisibility", "DeleteMessage",          "GetQueueAttributes",
    "GetQueueUrl",             "ListDeadLetterSourceQueues", "ListQueueTags",
    "PurgeQueue",              "ReceiveMessage",         "SendMessage",
    "StartMessageMoveTask",    "ListMessageMoveTasks",   "CancelMessageMoveTask",
};
constexpr std::string_view kOwnerOnly[] = {
    "AddPermission", "CreateQueue", "DeleteQueue", "ListQueues", "RemovePermission",
    "SetQueueAttributes", "TagQueue", "UntagQueue",
};

bool valid_label(std::string_view label) {
  return !label.empty() && label.size() <= 80 &&
         std::all_of(label.begin(), label.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_';
         });
}

std::string checked_label(const json& input) {
  const std::string label = string_member(input, "Label", true);
  if (!valid_label(label)) {
    fail("InvalidParameterValue",
         fmt::format("Value {} for parameter Label is invalid. Reason: Can only include "
                     "alphanumeric characters, hyphens, or underscores. 1 to 80 in length.",
                     label.substr(0, 100)));
  }
  return label;
}

// The queue's stored policy as a document with a Statement list (a single statement object is
// made a list); a new one when the queue has none.
ordered_json policy_of(const std::string& stored, const std::string& arn) {
  ordered_json policy;
  if (!stored.empty()) policy = ordered_json::parse(stored, nullptr, false);
  if (!policy.is_object()) {
    policy = ordered_json{{"Version", "2012-10-17"}, {"Id", arn + "/SQSDefaultPolicy"}};
  }
  ordered_json& statements = policy["Statement"];
  if (statements.is_object()) statements = ordered_json::array({statements});
  if (!statements.is_array()) statements = ordered_json::array();
  return policy;
}

bool has_sid(const ordered_json& statement, const std::string& label) {
  return statement.is_object() && statement.contains("Sid") && statement["Sid"] == label;
}

}  // namespace

json SqsService::add_permission(Call& c) {
  auto q = queue_of(c);
  const std::string label = checked_label(c.input);
  const std::vector<std::string> accounts = string_list(c.input, "AWSAccountIds");
  const std::vector<std::string> actions = string_list(c.input, "Actions");
  if (accounts.empty()) {
    fail("InvalidParameterValue",
         "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.");
  }
  if (actions.empty()) fail("MissingParameter", "The request must contain the parameter Actions.");
  if (actions.size() > kMaxActions) {
    fail("OverLimit", fmt::format("{} Actions were found, maximum allowed is {}.", actions.size(),
                                  kMaxActions));
  }
  if (accounts.size() > kMaxPrincipals) {
    fail("OverLimit", fmt::format("{} principals were found, maximum allowed is {}.",
                                  accounts.size(), kMaxPrincipals));
  }
  ordered_json principals = ordered_json::array();
  for (const std::string& a : accounts) {
    if (a.size() != 12 || a.find_first_not_of("0123456789") != std::string::npos) {
      fail("InvalidParameterValue",
           fmt::format("Value {} for parameter AWSAccountIds is invalid. Reason: An AWS account "
                       "id is 12 digits.",
                       a.substr(0, 100)));
    }
    principals.push_back(fmt::format("arn:aws:iam::{}:root", a));
  }
  ordered_json granted = ordered_json::array();
  for (const std::string& a : actions) {
    const auto is = [&](std::string_view n) { return n == a; };
    if (std::any_of(std::begin(kOwnerOnly), std::end(kOwnerOnly), is)) {
      fail("InvalidParameterValue",
           fmt::format("Value SQS:{} for parameter ActionName is invalid. Reason: Only the queue "
                       "owner is allowed to invoke this action.",
                       a));
    }
    if (a != "*" && !std::any_of(std::begin(kShareable), std::end(kShareable), is)) {
      fail("InvalidParameterValue",
           fmt::format("Value SQS:{} for parameter ActionName is invalid. Reason: Please refer "
                       "to the appropriate WSDL for a list of valid actions.",
                       a.substr(0, 100)));
    }
    granted.push_back("SQS:" + a);
  }
  const std::string arn = queue_arn(options_.regions.primary(), options_.account, q->name);
  ordered_json statement = {
      {"Sid", label},
      {"Effect", "Allow"},
      {"Principal", {{"AWS", principals.size() == 1 ? principals[0] : principals}}},
      {"Action", granted.size() == 1 ? granted[0] : granted},
      {"Resource", arn}};
  // Under the queue row's lock: AddPermission and RemovePermission through any server apply
  // one after another, each to the policy the other left.
  catalog_.edit_attribute(q->name, "Policy", [&](const std::string& stored) {
    ordered_json policy = policy_of(stored, arn);
    ordered_json& statements = policy["Statement"];
    for (const auto& s : statements) {
      if (has_sid(s, label)) {
        fail("InvalidParameterValue",
             fmt::format("Value {} for parameter Label is invalid. Reason: Already exists.", label));
      }
    }
    if (statements.size() >= kMaxStatements) {
      fail("OverLimit", fmt::format("The policy has {} statements, maximum allowed is {}.",
                                    statements.size(), kMaxStatements));
    }
    statements.push_back(statement);
    std::string text = policy.dump();
    if (text.size() > kMaxPolicyBytes) {
      fail("OverLimit", fmt::format("The policy would be {} bytes, maximum allowed is {}.",
                                    text.size(), kMaxPolicyBytes));
    }
    return text;
  });
  return json::object();
}

json SqsService::remove_permission(Call& c) {
  auto q = queue_of(c);
  const std::string label = checked_label(c.input);
  const std::string arn = queue_arn(options_.regions.primary(), options_.account, q->name);
  catalog_.edit_attribute(q->name, "Policy", [&](const std::string& stored) {
    ordered_json policy = policy_of(stored, arn);
    ordered_json& statements = policy["Statement"];
    ordered_json kept = ordered_json::array();
    for (const auto& s : statements) {
      if (!has_sid(s, label)) kept.push_back(s);
    }
    if (kept.size() == statements.size()) {
      fail("InvalidParameterValue",
           fmt::format("Value {} for parameter Label is invalid. Reason: can't find label on "
                       "existing policy.",
                       label));
    }
    statements = std::move(kept);
    // A policy left without statements goes, as a queue that never had one.
    return statements.empty() ? std::string() : policy.dump();
  });
  return json::object();
}

}  // namespace txmq::server
