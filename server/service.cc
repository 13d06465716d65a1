#include "server/call.h"

#include <random>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "server/digests.h"
#include "server/fail.h"
#include "server/wire.h"

namespace txmq::server {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::json;

[[noreturn]] void fail(std::string_view code, std::string message) {
  throw SqsError::of(code, std::move(message));
}

namespace {

std::string_view header(const HttpRequest& r, std::string_view name) {
  auto it = r.find(boost::beast::string_view(name.data(), name.size()));
  if (it == r.end()) return {};
  return {it->value().data(), it->value().size()};
}

}  // namespace

std::string new_request_id() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  const std::uint64_t a = random();
  const std::uint64_t b = random();
  return fmt::format("{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}", a >> 32, (a >> 16) & 0xffff,
                     a & 0xfff, 0x8000 | ((b >> 48) & 0x3fff), b & 0xffffffffffffULL);
}

SqsService::SqsService(Client& client, asio::io_context& io, ServiceOptions options)
    : client_(client),
      io_(io),
      options_(std::move(options)),
      catalog_(client, options_.region, options_.account),
      workers_(static_cast<std::size_t>(options_.workers)) {
  if (!options_.credentials_file.empty()) {
    credentials_ = std::make_shared<Credentials>(Credentials::load(options_.credentials_file));
  }
}

SqsService::~SqsService() {
  shutdown();
}

void SqsService::reload_credentials() {
  if (options_.credentials_file.empty()) return;
  try {
    auto fresh = std::make_shared<Credentials>(Credentials::load(options_.credentials_file));
    std::lock_guard lock(credentials_mutex_);
    credentials_ = std::move(fresh);
    if (options_.log) {
      options_.log(LogLevel::kInfo,
                   fmt::format("credentials reloaded from {}: {} keys", options_.credentials_file,
                               credentials_->size()),
                   {{"file", options_.credentials_file}, {"keys", credentials_->size()}});
    }
  } catch (const std::exception& e) {
    if (options_.log) {
      options_.log(LogLevel::kError,
                   fmt::format("credentials not reloaded, old keys kept: {}", e.what()),
                   {{"file", options_.credentials_file}, {"error", e.what()}});
    }
  }
}

void SqsService::shutdown() {
  {
    // Under the lock that handle() posts under: every request posted before this runs before
    // join() returns, and none is posted after it (it would never run, and its connection would
    // wait for an answer forever).
    std::lock_guard lock(posting_mutex_);
    if (stopping_.exchange(true)) return;
  }
  std::set<std::shared_ptr<Poll>> polls;
  {
    std::lock_guard lock(polls_mutex_);
    polls = polls_;
  }
  for (const auto& p : polls) finish_poll(p, {});
  workers_.join();
}

void SqsService::handle(HttpRequest&& request, Responder respond) {
  counters_.requests.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(posting_mutex_);
  if (stopping_) {
    HttpResponse r;
    r.status = 503;
    r.body = "txmq serve is stopping\n";
    respond(std::move(r));
    return;
  }
  if (options_.web) {
    std::shared_ptr<const Credentials> credentials;
    {
      std::lock_guard credentials_lock(credentials_mutex_);
      credentials = credentials_;
    }
    if (options_.web(request, respond, credentials)) return;
  }
  auto call = std::make_shared<Call>();
  call->request = std::move(request);
  call->respond = std::move(respond);
  asio::post(workers_, [this, call] { execute(call); });
}

void SqsService::execute(const std::shared_ptr<Call>& call) {
  Call& c = *call;
  const HttpRequest& r = c.request;
  try {
    const std::string_view target = header(r, "x-amz-target");
    c.host = std::string(header(r, "host"));
    const std::string_view raw_target(r.target().data(), r.target().size());
    c.path = std::string(raw_target.substr(0, raw_target.find('?')));
    if (!target.empty() || header(r, "content-type").starts_with("application/x-amz-json")) {
      c.protocol = Call::Protocol::kJson;
      const std::size_t dot = target.find('.');
      const std::string_view service = target.substr(0, dot);
      if (dot == std::string_view::npos || (service != "AmazonSQS" && service != "Txmq")) {
        fail("UnknownOperationException",
             "X-Amz-Target must be AmazonSQS.<Action> (or Txmq.SendMessageBatch)");
      }
      c.txmq_action = service == "Txmq";
      c.action = std::string(target.substr(dot + 1));
    } else {
      c.protocol = Call::Protocol::kQuery;
    }

    std::vector<std::pair<std::string_view, std::string_view>> headers;
    for (const auto& f : r) {
      headers.emplace_back(std::string_view(f.name_string().data(), f.name_string().size()),
                           std::string_view(f.value().data(), f.value().size()));
    }
    std::shared_ptr<const Credentials> credentials;
    {
      std::lock_guard lock(credentials_mutex_);
      credentials = credentials_;
    }
    const SignedRequest signed_request{std::string_view(r.method_string().data(),
                                                        r.method_string().size()),
                                       raw_target, std::move(headers), r.body()};
    if (auto failure = verify(signed_request, credentials.get(), options_.region,
                              std::chrono::system_clock::now())) {
      throw SqsError::of(failure->code, failure->message);
    }

    if (c.protocol == Call::Protocol::kJson) {
      if (r.method() != http::verb::post) {
        fail("InvalidAction", "The JSON protocol takes POST requests only");
      }
      c.input = r.body().empty() ? json::object() : json::parse(r.body(), nullptr, false);
      if (!c.input.is_object()) {
        fail("SerializationException", "The request body is not a JSON object");
      }
    } else {
      std::vector<std::pair<std::string, std::string>> params;
      if (const std::size_t q = raw_target.find('?'); q != std::string_view::npos) {
        params = parse_form(raw_target.substr(q + 1));
      }
      if (r.method() == http::verb::post) {
        auto body = parse_form(r.body());
        params.insert(params.end(), std::make_move_iterator(body.begin()),
                      std::make_move_iterator(body.end()));
      } else if (r.method() != http::verb::get) {
        fail("InvalidAction", "The Query protocol takes GET or POST requests");
      }
      c.action = query_action(params);
      c.input = query_input(c.action, params);
    }
    // Older Query clients post to the queue's URL instead of naming it.
    if (!c.input.contains("QueueUrl") && c.path.size() > 1 &&
        std::count(c.path.begin(), c.path.end(), '/') == 2) {
      c.input["QueueUrl"] = c.path;
    }
    dispatch(call);
  } catch (...) {
    reply_error(c, std::current_exception());
  }
}

void SqsService::dispatch(const std::shared_ptr<Call>& call) {
  Call& c = *call;
  const std::string& a = c.action;
  if (c.txmq_action) {
    if (a == "SendMessageBatch") return reply(c, send_message_batch(c, 10000));
    fail("UnknownOperationException", fmt::format("Unknown action Txmq.{}", a));
  }
  if (a == "SendMessage") return send_message(call);
  if (a == "ReceiveMessage") return receive_message(call);
  if (a == "DeleteMessage") return delete_message(call);
  json out;
  if (a == "CreateQueue") out = create_queue(c);
  else if (a == "GetQueueUrl") out = get_queue_url(c);
  else if (a == "ListQueues") out = list_queues(c);
  else if (a == "DeleteQueue") out = delete_queue(c);
  else if (a == "GetQueueAttributes") out = get_queue_attributes(c);
  else if (a == "SetQueueAttributes") out = set_queue_attributes(c);
  else if (a == "PurgeQueue") out = purge_queue(c);
  else if (a == "SendMessageBatch") out = send_message_batch(c, 10);
  else if (a == "DeleteMessageBatch") out = delete_message_batch(c);
  else if (a == "ChangeMessageVisibility") out = change_message_visibility(c);
  else if (a == "ChangeMessageVisibilityBatch") out = change_message_visibility_batch(c);
  else if (a == "TagQueue") out = tag_queue(c);
  else if (a == "UntagQueue") out = untag_queue(c);
  else if (a == "ListQueueTags") out = list_queue_tags(c);
  else if (a == "ListDeadLetterSourceQueues") out = list_dead_letter_source_queues(c);
  else if (c.protocol == Call::Protocol::kJson) {
    fail("UnknownOperationException", fmt::format("Unknown action {}", a));
  } else {
    fail("InvalidAction", fmt::format("The action {} is not valid for this endpoint.", a));
  }
  reply(c, out);
}

void SqsService::count_request(const Call& c, std::string_view outcome) {
  if (options_.request_metrics == nullptr) return;
  options_.request_metrics->record(
      c.action, c.txmq_action, outcome,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - c.arrived).count());
}

void SqsService::reply(Call& c, const json& output) {
  if (c.answered.exchange(true)) return;
  count_request(c, "ok");
  HttpResponse r;
  r.headers.emplace_back("x-amzn-RequestId", c.request_id);
  if (c.protocol == Call::Protocol::kJson) {
    r.content_type = "application/x-amz-json-1.0";
    r.body = output.dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    r.content_type = "text/xml";
    r.body = query_response_xml(c.action, output, c.request_id);
  }
  c.respond(std::move(r));
}

void SqsService::reply_error(Call& c, std::exception_ptr error) {
  if (c.answered.exchange(true)) return;
  SqsError e = SqsError::of("InternalError", "internal error");
  try {
    std::rethrow_exception(error);
  } catch (const SqsError& sqs) {
    e = sqs;
  } catch (const Error& txmq) {
    switch (txmq.code()) {
      case Errc::kNotFound:
        e = SqsError::of("QueueDoesNotExist", "The specified queue does not exist.");
        break;
      case Errc::kInvalidArgument:
        e = SqsError::of("InvalidParameterValue", txmq.what());
        break;
      case Errc::kUnavailable:
      case Errc::kAborted:
      case Errc::kCommitUnknown:
        e = SqsError::of("ServiceUnavailable", fmt::format("database: {}", txmq.what()));
        break;
      default:
        e = SqsError::of("InternalError", txmq.what());
    }
  } catch (const std::exception& other) {
    e = SqsError::of("InternalError", other.what());
  }
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  count_request(c, e.code);
  if (options_.log) {
    const std::string action = c.action.empty() ? "request" : c.action;
    options_.log(
        e.http_status >= 500 ? LogLevel::kError : LogLevel::kWarning,
        fmt::format("{} {}: {} {}: {}", action, c.request_id, e.http_status, e.code, e.what()),
        {{"action", action},
         {"request_id", c.request_id},
         {"status", e.http_status},
         {"code", e.code},
         {"error", e.what()}});
  }
  HttpResponse r;
  r.status = static_cast<unsigned>(e.http_status);
  r.headers.emplace_back("x-amzn-RequestId", c.request_id);
  if (c.protocol == Call::Protocol::kJson) {
    JsonErrorReply j = json_error(e);
    r.content_type = "application/x-amz-json-1.0";
    r.body = std::move(j.body);
    r.headers.emplace_back("x-amzn-query-error", std::move(j.query_error_header));
  } else {
    r.content_type = "text/xml";
    r.body = query_error_xml(e, c.request_id);
  }
  c.respond(std::move(r));
}

}  // namespace txmq::server
