// The archive of acknowledged messages: reading it and purging it past retention.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/queue_context.h"

namespace txmq::internal {

// The archive (settle.cc): rows from from_id on, in id order; purge deletes rows past the
// topic's retention in bounded batches and returns how many went.
std::vector<ArchivedMessage> archived(QueueContext& q, std::string_view topic,
                                      std::uint64_t from_id, std::size_t limit);
std::uint64_t purge_archive(QueueContext& q, std::string_view topic);
// One bounded purge statement: deletes up to kArchivePurgeRows archived rows acknowledged over
// `keep` ago, walking the acked_at index in autocommit; returns how many went.
constexpr std::uint64_t kArchivePurgeRows = 1000;
std::uint64_t purge_archive_rows(Connection& c, const TopicTables& t, Micros keep);

}  // namespace txmq::internal
