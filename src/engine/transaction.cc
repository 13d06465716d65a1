// Transaction (the application's statements and sends in one transaction), Outbox (sends on an
// enlisted MYSQL*), and SqlRow.
#include <fmt/format.h>

#include <charconv>

#include "engine/exactly_once.h"
#include "engine/queue_context.h"
#include "engine/send.h"
#include "engine/transaction_impl.h"

namespace txmq {

using internal::Connection;
using internal::Param;

namespace {

std::vector<Param> to_params(std::span<const SqlValue> values) {
  std::vector<Param> params;
  params.reserve(values.size());
  for (const SqlValue& v : values) {
    params.push_back(std::visit([](auto x) -> Param { return x; }, v.get()));
  }
  return params;
}

SqlResult to_sql_result(internal::Result r) {
  SqlResult out;
  out.affected_rows = r.affected_rows;
  out.insert_id = r.insert_id;
  out.rows.reserve(r.rows.size());
  for (internal::Row& row : r.rows) {
    std::vector<SqlRow::Cell> cells(row.size());
    for (std::size_t i = 0; i < row.size(); ++i) {
      const internal::Row::Cell& from = row.cell(i);
      cells[i] = {from.null, from.is_integer, from.integer, row.take_bytes(i)};
    }
    out.rows.emplace_back(std::move(cells));
  }
  return out;
}

std::vector<std::uint64_t> send_on(internal::QueueContext& q, Connection& c, std::string_view topic,
                                   std::span<const OutgoingMessage> messages) {
  const TopicInfo info = internal::check_send(q, topic, messages, &c);
  return internal::on_topic(
      q, topic, [&] { return internal::insert_messages(q, c, info, messages); }, true);
}

OutgoingMessage one_message(std::string_view payload, const SendOptions& options) {
  return OutgoingMessage{std::string(payload), options.key, options.delay, options.dedup_key,
                         options.attributes, options.tenant};
}

}  // namespace

// --- SqlRow ------------------------------------------------------------------------------------

const SqlRow::Cell& SqlRow::cell(std::size_t column) const {
  if (column >= cells_.size()) {
    throw Error(Errc::kInvalidArgument,
                fmt::format("column {} asked of a row of {} columns", column, cells_.size()));
  }
  return cells_[column];
}

std::int64_t SqlRow::as_int(std::size_t column) const {
  const Cell& c = cell(column);
  if (c.null) throw Error(Errc::kInvalidArgument, fmt::format("column {} is NULL", column));
  if (c.is_integer) return c.integer;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(c.bytes.data(), c.bytes.data() + c.bytes.size(), value);
  if (ec != std::errc() || end != c.bytes.data() + c.bytes.size()) {
    throw Error(Errc::kInvalidArgument, fmt::format("column {} is not an integer", column));
  }
  return value;
}

std::string SqlRow::as_string(std::size_t column) const {
  const Cell& c = cell(column);
  if (c.null) return {};
  return c.is_integer ? std::to_string(c.integer) : c.bytes;
}

// --- Transaction -------------------------------------------------------------------------------

void Transaction::Impl::check_usable() const {
  if (!open) {
    throw Error(Errc::kFailedPrecondition,
                "the transaction has already been committed or rolled back");
  }
  if (failed) {
    throw Error(failed->code(),
                fmt::format("the transaction was ended by an earlier error and can only be rolled "
                            "back: {}",
                            failed->what()),
                failed->server_errno());
  }
}

Transaction::Transaction(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Transaction::Transaction(Transaction&&) noexcept = default;
Transaction& Transaction::operator=(Transaction&& other) noexcept {
  if (this != &other) {
    if (impl_ && impl_->open && !impl_->managed) rollback();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Transaction::~Transaction() {
  if (impl_ && impl_->open && !impl_->managed) rollback();
}

SqlResult Transaction::execute(std::string_view sql, std::span<const SqlValue> params) {
  Connection* on = impl_->work != nullptr ? impl_->work : impl_->c;
  return impl_->guarded([&] { return to_sql_result(on->execute(sql, to_params(params))); });
}

std::uint64_t Transaction::send(std::string_view topic, std::string_view payload,
                                const SendOptions& options) {
  OutgoingMessage m = one_message(payload, options);
  return send_batch(topic, std::span<const OutgoingMessage>(&m, 1)).at(0);
}

std::vector<std::uint64_t> Transaction::send_batch(std::string_view topic,
                                                   std::span<const OutgoingMessage> messages) {
  std::vector<std::uint64_t> ids =
      impl_->guarded([&] { return send_on(impl_->q, *impl_->c, topic, messages); });
  internal::SentCount& sent = impl_->sent[std::string(topic)];
  sent.total += ids.size();
  sent.claimable += internal::claimable_now(messages);
  return ids;
}

void Transaction::commit() {
  if (impl_->managed) {
    throw Error(Errc::kFailedPrecondition,
                "Client::process and Client::transact commit the transaction they lend a "
                "function: return from it to commit, throw to roll back");
  }
  if (impl_->failed) {
    Error why = *impl_->failed;
    rollback();
    throw Error(
        why.code(),
        fmt::format("cannot commit: an earlier error ended the transaction ({})", why.what()),
        why.server_errno());
  }
  impl_->check_usable();
  impl_->open = false;
  try {
    impl_->c->commit();
  } catch (...) {
    impl_->owned.reset();  // back to the pool, which discards a broken connection
    throw;
  }
  internal::announce_sent(impl_->q, impl_->sent);
  impl_->owned.reset();
}

void Transaction::rollback() {
  if (impl_->managed) {
    throw Error(Errc::kFailedPrecondition,
                "Client::process and Client::transact roll back the transaction they lend a "
                "function when it throws: throw instead");
  }
  if (!impl_->open) return;
  impl_->open = false;
  impl_->c->rollback();
  impl_->owned.reset();
}

bool Transaction::open() const noexcept { return impl_ && impl_->open; }

// --- Outbox ------------------------------------------------------------------------------------

Outbox::Outbox(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Outbox::Outbox(Outbox&&) noexcept = default;
Outbox& Outbox::operator=(Outbox&&) noexcept = default;
Outbox::~Outbox() = default;

std::uint64_t Outbox::send(std::string_view topic, std::string_view payload,
                           const SendOptions& options) {
  OutgoingMessage m = one_message(payload, options);
  return send_batch(topic, std::span<const OutgoingMessage>(&m, 1)).at(0);
}

std::vector<std::uint64_t> Outbox::send_batch(std::string_view topic,
                                              std::span<const OutgoingMessage> messages) {
  if (!impl_->c.session_in_transaction()) {
    throw Error(Errc::kFailedPrecondition,
                "the enlisted connection has no transaction open (autocommit is on and no START "
                "TRANSACTION was run): the send would commit on its own; open a transaction "
                "first, or use Client::send");
  }
  return send_on(impl_->q, impl_->c, topic, messages);
}

}  // namespace txmq
