#include "server/sqs/service.h"

#include <algorithm>
#include <random>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "server/auth/web_guard.h"
#include "server/sqs/inputs.h"
#include "server/sqs/move_tasks.h"
#include "server/sqs/service_call.h"
#include "server/sqs/wire.h"

namespace txmq::server {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::json;

namespace {

std::string_view header(const RequestHeader& r, std::string_view name) {
  auto it = r.find(boost::beast::string_view(name.data(), name.size()));
  if (it == r.end()) return {};
  return {it->value().data(), it->value().size()};
}

// Nesting deeper than any SQS input goes (4 levels) is refused before parsing: a parser builds
// a value per level, so 8 MiB of '[' would cost hundreds of MiB.
constexpr int kMaxJsonDepth = 32;

bool json_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// The AWS JSON 1.0 protocol (else the Query protocol): what the header says, which is all a
// refusal before the body or at a deadline can go by.
bool json_protocol(const RequestHeader& r) {
  return !header(r, "x-amz-target").empty() ||
         header(r, "content-type").starts_with("application/x-amz-json");
}

// An SQS error in the protocol's shape.
HttpResponse error_response(const SqsError& e, bool json, const std::string& request_id) {
  HttpResponse r;
  r.status = static_cast<unsigned>(e.http_status);
  r.headers.emplace_back("x-amzn-RequestId", request_id);
  if (json) {
    JsonErrorReply j = json_error(e);
    r.content_type = "application/x-amz-json-1.0";
    r.body = std::move(j.body);
    r.headers.emplace_back("x-amzn-query-error", std::move(j.query_error_header));
  } else {
    r.content_type = "text/xml";
    r.body = query_error_xml(e, request_id);
  }
  return r;
}

// Views into `r`: the request as SigV4 reads it.
SignedRequest signed_request_of(const RequestHeader& r, std::string_view body) {
  std::vector<std::pair<std::string_view, std::string_view>> headers;
  for (const auto& f : r) {
    headers.emplace_back(std::string_view(f.name_string().data(), f.name_string().size()),
                         std::string_view(f.value().data(), f.value().size()));
  }
  return {std::string_view(r.method_string().data(), r.method_string().size()),
          std::string_view(r.target().data(), r.target().size()), std::move(headers), body};
}

}  // namespace

std::optional<SqsError> cross_site_refusal(const RequestHeader& r, bool with_credentials) {
  // With --credentials every request carries a signature made with a secret: a page on another
  // site cannot make one. Without, any well-formed signature passes, so the server (on loopback)
  // refuses what only a browser would send: a request under another host name (DNS
  // rebinding), one that says it comes from another origin or site, and signatures in the
  // query string (an <img> or a link can carry one; the SDKs sign in the Authorization header,
  // which a page cannot set on another site's request without CORS, which this server never
  // allows).
  if (with_credentials) return std::nullopt;
  if (!web_guard::loopback_host(header(r, "host"))) {
    return SqsError::of("AccessDenied",
                        "Without --credentials txmq serve answers only requests to a loopback "
                        "host name (localhost, 127.0.0.1, [::1]) in the Host header.");
  }
  if (!header(r, "origin").empty()) {
    return SqsError::of("AccessDenied",
                        "Without --credentials txmq serve refuses requests that carry an Origin "
                        "header (a web page's): give --credentials to serve browsers.");
  }
  const std::string_view site = header(r, "sec-fetch-site");
  if (!site.empty() && site != "none" && site != "same-origin") {
    return SqsError::of("AccessDenied",
                        "Without --credentials txmq serve refuses requests a browser sends on "
                        "behalf of another site (Sec-Fetch-Site).");
  }
  const std::string_view target(r.target().data(), r.target().size());
  if (has_query_signature(target)) {
    return SqsError::of("AccessDenied",
                        "Without --credentials txmq serve refuses signatures in the query string "
                        "(presigned URLs): any signature would pass. Sign in the Authorization "
                        "header, or give --credentials.");
  }
  return std::nullopt;
}

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
      catalog_(client, options_.regions, options_.account,
               options_.shared_storage        ? TableCreation::kShared
               : options_.tables_at_first_use ? TableCreation::kAtFirstUse
                                              : TableCreation::kNow),
      workers_(static_cast<std::size_t>(options_.workers)),
      deadline_timer_(io),
      move_tasks_(std::make_unique<MoveTasks>(client, catalog_,
                                              MoveTaskOptions{.log = options_.log})) {
  if (!options_.credentials_file.empty()) {
    credentials_ = std::make_shared<Credentials>(Credentials::load(options_.credentials_file));
  }
  watch_deadlines();
}

std::shared_ptr<const Credentials> SqsService::current_credentials() const {
  std::lock_guard lock(credentials_mutex_);
  return credentials_;
}

void SqsService::track(const std::shared_ptr<Call>& call) {
  call->deadline = (call->arrived + options_.request_timeout).time_since_epoch().count();
  std::lock_guard lock(calls_mutex_);
  calls_.insert_or_assign(call.get(), call);
}

void SqsService::untrack(const Call& call) {
  std::lock_guard lock(calls_mutex_);
  calls_.erase(&call);
}

void SqsService::watch_deadlines() {
  deadline_timer_.expires_after(std::chrono::milliseconds(250));
  // Also while shutdown() waits for workers held by a database that does not answer: their
  // callers still get their 503. The timer goes (cancelled) once the io_context has stopped.
  deadline_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    std::vector<std::shared_ptr<Call>> late;
    {
      std::lock_guard lock(calls_mutex_);
      for (auto it = calls_.begin(); it != calls_.end();) {
        std::shared_ptr<Call> call = it->second.lock();
        if (!call) {
          it = calls_.erase(it);  // gone unanswered (it never is, but its key must not stay)
          continue;
        }
        if (call->deadline.load(std::memory_order_relaxed) <= now) late.push_back(std::move(call));
        ++it;
      }
    }
    for (const auto& call : late) reply_timeout(*call);
    watch_deadlines();
  });
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
  move_tasks_->stop();
}

void SqsService::start_move_tasks() { move_tasks_->start(); }

void SqsService::handle(HttpRequest&& request, Responder respond) {
  counters_.requests.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(posting_mutex_);
    if (stopping_) {
      HttpResponse r;
      r.status = 503;
      r.body = "txmq serve is stopping\n";
      respond(std::move(r));
      return;
    }
    if (options_.web) {
      if (options_.web(request, respond, current_credentials())) return;
    }
  }
  auto call = std::make_shared<Call>();
  call->request = std::move(request);
  call->respond = std::move(respond);
  track(call);
  Call& c = *call;
  // A small request is read here, on the HTTP thread (no database: only hashing and parsing of
  // a bounded body), so that a call that needs no worker does not wait for one. A large one
  // would hold up this thread's other connections: it is read on its worker.
  if (c.request.body().size() <= kReadOnHttpThread) {
    try {
      read_request(c.request, current_credentials().get(), options_.regions,
                   std::chrono::system_clock::now(), c);
      c.read = true;
      if (dispatch_on_http_thread(call)) return;
    } catch (...) {
      reply_error(c, std::current_exception());
      return;
    }
  }
  // Under the lock shutdown() stops the workers under: a call posted runs before they end.
  std::lock_guard lock(posting_mutex_);
  if (stopping_) {
    return reply_error(c, std::make_exception_ptr(SqsError::of(
                              "ServiceUnavailable", "txmq serve is stopping; retry the call.")));
  }
  asio::post(workers_, [this, call] { execute(call); });
}

// Single sends and deletes of a queue in the catalog's cache: checked and queued for their
// group commit on the HTTP thread. Nothing else blocks on the way; a cache miss (a database
// read) or any other action goes to a worker.
bool SqsService::dispatch_on_http_thread(const std::shared_ptr<Call>& call) {
  Call& c = *call;
  if (c.txmq_action) return false;
  const bool send = c.action == "SendMessage";
  const bool send_batch = c.action == "SendMessageBatch";
  const bool remove = c.action == "DeleteMessage";
  const bool remove_batch = c.action == "DeleteMessageBatch";
  if (!send && !send_batch && !remove && !remove_batch) return false;
  const auto url = c.input.find("QueueUrl");
  if (url == c.input.end() || !url->is_string()) return false;  // its worker says what is wrong
  std::shared_ptr<const QueueInfo> q =
      catalog_.cached(queue_name_of_url(url->get_ref<const std::string&>()));
  if (!q) return false;
  // Making a queue fair (an ALTER) is a worker's; so is a FIFO batch's one transaction.
  if (send && becomes_fair(*q, c.input)) return false;
  if (send_batch) {
    const auto entries = c.input.find("Entries");
    if (q->fifo || entries == c.input.end() || !entries->is_array()) return false;
    for (const json& e : *entries) {
      if (becomes_fair(*q, e)) return false;
    }
  }
  c.queue = std::move(q);
  c.on_http_thread = true;
  if (send) send_message(call);
  else if (send_batch) send_message_batch_grouped(call);
  else if (remove) delete_message(call);
  else delete_message_batch(call);
  return true;
}

void read_request(const HttpRequest& r, const Credentials* credentials, const Regions& regions,
                  std::chrono::system_clock::time_point now, SqsRequest& out) {
  if (auto refusal = cross_site_refusal(r, credentials != nullptr)) throw *refusal;
  const std::string_view target = header(r, "x-amz-target");
  out.host = std::string(header(r, "host"));
  const std::string_view raw_target(r.target().data(), r.target().size());
  out.path = std::string(raw_target.substr(0, raw_target.find('?')));
  if (json_protocol(r)) {
    out.protocol = SqsRequest::Protocol::kJson;
    const std::size_t dot = target.find('.');
    const std::string_view service = target.substr(0, dot);
    if (dot == std::string_view::npos || (service != "AmazonSQS" && service != "Txmq")) {
      fail("UnknownOperationException",
           "X-Amz-Target must be AmazonSQS.<Action> (or Txmq.SendMessageBatch)");
    }
    out.txmq_action = service == "Txmq";
    out.action = std::string(target.substr(dot + 1, 64));
  } else {
    out.protocol = SqsRequest::Protocol::kQuery;
  }

  // The signature covers the method, the target (path and query), the signed headers (Host and
  // X-Amz-Target among them) and the body: everything read below.
  if (auto failure = verify(signed_request_of(r, r.body()), credentials, regions, now, out.region)) {
    throw SqsError::of(failure->code, failure->message);
  }

  if (out.protocol == SqsRequest::Protocol::kJson) {
    if (r.method() != http::verb::post) {
      fail("InvalidAction", "The JSON protocol takes POST requests only");
    }
    if (json_deeper_than(r.body(), kMaxJsonDepth)) {
      fail("SerializationException",
           fmt::format("The request body nests deeper than {} levels", kMaxJsonDepth));
    }
    out.input = r.body().empty() ? json::object() : json::parse(r.body(), nullptr, false);
    if (!out.input.is_object()) {
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
    out.action = query_action(params);
    out.input = query_input(out.action, params);
  }
  // Older Query clients post to the queue's URL instead of naming it.
  if (!out.input.contains("QueueUrl") && out.path.size() > 1 &&
      std::count(out.path.begin(), out.path.end(), '/') == 2) {
    out.input["QueueUrl"] = out.path;
  }
}

SqsService::BodyAdmission SqsService::admit_body(const RequestHeader& h) const {
  BodyAdmission admission;
  const std::string_view target(h.target().data(), h.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const std::shared_ptr<const Credentials> credentials = current_credentials();
  // The probes and GET / take no body. /metrics and the dashboard are refused here, before any
  // body, when the request may not see them (web_guard: Basic auth with --credentials, a
  // loopback Host without); their handlers check again. The dashboard's changes are small
  // (a few hundred messages named at most), and use the budget's uncredentialed share.
  if (path == "/healthz" || path == "/readyz" ||
      (path == "/" && h.method() == http::verb::get && target == "/")) {
    admission.body_limit = 0;
    return admission;
  }
  const bool metrics = path == "/metrics";
  if (metrics || path.starts_with("/ui/")) {
    admission.body_limit = metrics ? 0 : kMaxDashboardBody;
    admission.web_refusal = web_guard::refusal(h, credentials.get(),
                                               metrics ? "/metrics" : "the txmq dashboard");
    return admission;
  }
  admission.json = json_protocol(h);
  if (auto refusal = cross_site_refusal(h, credentials != nullptr)) {
    admission.refusal = std::move(refusal);
    return admission;
  }
  const SignedRequest without_body = signed_request_of(h, {});
  if (auto failure = precheck(without_body, credentials.get(), options_.regions,
                              std::chrono::system_clock::now())) {
    admission.refusal = SqsError::of(failure->code, failure->message);
    return admission;
  }
  // Signed by a known key (as far as a header shows), or the server has no credentials.
  admission.credentialed = true;
  // Only Txmq.SendMessageBatch (10,000 messages) needs more than SQS's largest request, and
  // only once the headers passed the checks above.
  if (header(h, "x-amz-target") == "Txmq.SendMessageBatch") {
    admission.body_limit = kMaxTxmqBatchBody;
  } else if (!admission.json) {
    admission.body_limit = kMaxQueryBody;
  }
  return admission;
}

Admission SqsService::admit(const RequestHeader& header) const {
  BodyAdmission checked = admit_body(header);
  Admission admission;
  admission.body_limit = checked.body_limit;
  admission.credentialed = checked.credentialed;
  if (checked.web_refusal) {
    admission.refuse = std::move(checked.web_refusal);
  } else if (checked.refusal) {
    counters_.requests.fetch_add(1, std::memory_order_relaxed);
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    const std::string request_id = new_request_id();
    log_failure(*checked.refusal, "request", request_id);
    admission.refuse = error_response(*checked.refusal, checked.json, request_id);
  }
  return admission;
}

void SqsService::execute(const std::shared_ptr<Call>& call) {
  Call& c = *call;
  if (c.answered) return;  // its deadline passed while it waited for a worker
  try {
    if (!c.read) {
      read_request(c.request, current_credentials().get(), options_.regions,
                   std::chrono::system_clock::now(), c);
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
  else if (a == "SendMessageBatch") {
    c.queue = queue_of(c);  // looked up once, for both paths
    if (!c.queue->fifo) return send_message_batch_grouped(call);
    out = send_message_batch(c, 10);  // a FIFO batch: one transaction, in order, all or nothing
  } else if (a == "DeleteMessageBatch") return delete_message_batch(call);
  else if (a == "ChangeMessageVisibility") out = change_message_visibility(c);
  else if (a == "ChangeMessageVisibilityBatch") out = change_message_visibility_batch(c);
  else if (a == "TagQueue") out = tag_queue(c);
  else if (a == "UntagQueue") out = untag_queue(c);
  else if (a == "ListQueueTags") out = list_queue_tags(c);
  else if (a == "ListDeadLetterSourceQueues") out = list_dead_letter_source_queues(c);
  else if (a == "StartMessageMoveTask") out = start_message_move_task(c);
  else if (a == "ListMessageMoveTasks") out = list_message_move_tasks(c);
  else if (a == "CancelMessageMoveTask") out = cancel_message_move_task(c);
  else if (a == "AddPermission") out = add_permission(c);
  else if (a == "RemovePermission") out = remove_permission(c);
  else if (c.protocol == Call::Protocol::kJson) {
    fail("UnknownOperationException", fmt::format("Unknown action {}", a));
  } else {
    fail("InvalidAction", fmt::format("The action {} is not valid for this endpoint.", a));
  }
  reply(c, out);
}

// The watchdog's answer. A worker may be filling in the call's protocol and action right now,
// so neither is read: the protocol is chosen from the request's header, as admit_body does.
void SqsService::reply_timeout(Call& c) {
  if (c.answered.exchange(true)) return;
  untrack(c);
  const SqsError e = SqsError::of(
      "ServiceUnavailable",
      fmt::format("The request was not answered within {} ms (the database is slow or "
                  "unreachable); retry it.",
                  options_.request_timeout.count()));
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  if (options_.record_request) {
    options_.record_request(
        "unknown", false, e.code,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - c.arrived).count());
  }
  if (options_.log) {
    options_.log(LogLevel::kError,
                 fmt::format("request {}: {} {}: {}", c.request_id, e.http_status, e.code, e.what()),
                 {{"request_id", c.request_id},
                  {"status", e.http_status},
                  {"code", e.code},
                  {"error", e.what()}});
  }
  HttpResponse r = error_response(e, json_protocol(c.request), c.request_id);
  r.headers.emplace_back("Retry-After", "1");
  c.respond(std::move(r));
}

void SqsService::count_request(const Call& c, std::string_view outcome) {
  if (!options_.record_request) return;
  options_.record_request(
      c.action, c.txmq_action, outcome,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - c.arrived).count());
}

void SqsService::reply(Call& c, const json& output) {
  if (c.answered.exchange(true)) return;
  untrack(c);
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
  untrack(c);
  const SqsError e = sqs_error_of(error);
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  count_request(c, e.code);
  log_failure(e, c.action.empty() ? "request" : c.action, c.request_id);
  c.respond(error_response(e, c.protocol == Call::Protocol::kJson, c.request_id));
}

void SqsService::log_failure(const SqsError& e, std::string_view action,
                             const std::string& request_id) const {
  if (!options_.log) return;
  // sigv4.h's refusals: what an operator most needs to see (a client with a wrong key, region or
  // clock), and what anyone can send at will.
  static constexpr std::string_view kAuthCodes[] = {
      "SignatureDoesNotMatch", "InvalidClientTokenId", "IncompleteSignature",
      "MissingAuthenticationToken", "RequestExpired", "AccessDenied"};
  const bool auth = std::find(std::begin(kAuthCodes), std::end(kAuthCodes), e.code) !=
                    std::end(kAuthCodes);
  std::uint64_t held_back = 0;
  if (auth && !refusal_log_.allow(std::chrono::steady_clock::now(), held_back)) return;
  std::string line =
      fmt::format("{} {}: {} {}: {}", action, request_id, e.http_status, e.code, e.what());
  nlohmann::json fields = {{"action", action},
                           {"request_id", request_id},
                           {"status", e.http_status},
                           {"code", e.code},
                           {"error", e.what()}};
  if (held_back > 0) {
    line += fmt::format(" ({} more refused requests not logged)", held_back);
    fields["not_logged"] = held_back;
  }
  options_.log(e.http_status >= 500 ? LogLevel::kError : LogLevel::kWarning, line, fields);
}

SqsError SqsService::sqs_error_of(std::exception_ptr error) {
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
  } catch (const json::type_error& wrong) {
    // An input member of the wrong type that an action read without checking: the caller's.
    e = SqsError::of("InvalidParameterValue",
                     fmt::format("A parameter has the wrong type: {}", wrong.what()));
  } catch (const std::exception& other) {
    e = SqsError::of("InternalError", other.what());
  }
  return e;
}

}  // namespace txmq::server
