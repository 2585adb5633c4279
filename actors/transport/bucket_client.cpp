#include "actors/transport/bucket_client.hpp"

#include <caf/response_handle.hpp>

#include "troupe/error.hpp"

namespace troupe {

namespace {

// An answer from the bucket itself that it will not take the request (a troupe error), as
// opposed to a bucket gone: its actor down or unreachable, no answer in time (CAF's errors and a
// lane's), or a backup promoted in its place (not_primary: send it there).
bool refusal(const caf::error& err) {
  return err.category() == error_category && !has_code(err, errc::not_primary);
}

caf::error actor_down() {
  return make_error(errc::job_failed, "the bucket's actor is down");
}

}  // namespace

std::shared_ptr<bucket_client> bucket_client::make(caf::scheduled_actor* self,
                                                   bucket_client_config config) {
  return std::shared_ptr<bucket_client>(new bucket_client(self, std::move(config)));
}

bucket_client::bucket_client(caf::scheduled_actor* self, bucket_client_config config)
    : self_(self), config_(std::move(config)) {
  buckets_.resize(config_.buckets.size());
  for (size_t b = 0; b < buckets_.size(); ++b) set_bucket(b, config_.buckets[b]);
}

void bucket_client::set_bucket(size_t b, bucket_actor handle) {
  auto& route = buckets_[b];
  if (route.channel && route.handle == handle) return;
  if (config_.monitor && handle) self_->monitor(handle);
  route.channel = choose_channel(self_, handle, config_.lanes, config_.timeout);
  route.handle = std::move(handle);
}

uint64_t bucket_client::track(const bucket_actor& target,
                              std::function<void(const caf::error&)> lost) {
  const uint64_t ticket = ++tickets_;
  in_flight_.emplace(ticket, in_flight{target, std::move(lost)});
  return ticket;
}

bool bucket_client::settle(uint64_t ticket) {
  if (in_flight_.erase(ticket) == 0) return false;
  send_waiting();
  return true;
}

bool bucket_client::window_has_room(size_t requests) const {
  return config_.window == 0 || in_flight_.empty() ||
         in_flight_.size() + requests <= config_.window;
}

void bucket_client::admit(size_t requests, std::function<void()> send) {
  if (waiting_.empty() && window_has_room(requests)) return send();
  waiting_.emplace_back(requests, std::move(send));
}

void bucket_client::send_waiting() {
  while (!waiting_.empty() && window_has_room(waiting_.front().first)) {
    auto send = std::move(waiting_.front().second);
    waiting_.pop_front();
    send();
  }
}

void bucket_client::find_again(size_t b, const bucket_actor& target, int attempt,
                               const caf::error& why, std::function<void()> retry,
                               failure_handler give_up) {
  if (attempt >= config_.max_attempts) return give_up(bucket_failure{why, false});
  if (buckets_[b].handle != target) return retry();  // already told of its successor
  config_.log.warn("bucket {} did not answer ({}); finding it again", b, describe(why));
  auto client = shared_from_this();
  config_.find_again(b, target, why, [client, b, target, retry, give_up](auto now) {
    if (!now) return give_up(bucket_failure{std::move(now.error()), false});
    if (client->buckets_[b].handle == target) client->set_bucket(b, std::move(*now));
    retry();
  });
}

void bucket_client::pull_lost(std::shared_ptr<pull_call> call, const bucket_actor& target,
                              const caf::error& why) {
  find_again(
      call->b, target, ++call->attempt, why, [this, call] { send_pull(call); }, call->failed);
}

void bucket_client::push_lost(std::shared_ptr<push_call> call, const bucket_actor& target,
                              const caf::error& why) {
  call->push->resend = true;  // it may have landed before the bucket went
  find_again(
      call->b, target, ++call->attempt, why, [this, call] { send_push(call); }, call->failed);
}

void bucket_client::expect_values(std::shared_ptr<pull_call> call, caf::message_id id) {
  const auto target = buckets_[call->b].handle;
  const uint64_t ticket =
      track(target, [this, call, target](const caf::error& err) { pull_lost(call, target, err); });
  auto client = shared_from_this();
  answer_to(self_, id).then(
      [client, call, ticket](const wire& w) {
        if (!client->settle(ticket)) return;
        if (client->config_.count_bytes) client->config_.count_bytes(0, double(bytes_of(w).size()));
        auto reply = decode_pull_into(w, call->place);
        if (!reply) return call->failed(bucket_failure{std::move(reply.error()), true});
        client->buckets_[call->b].read_clock = reply->clock;
        call->done(*reply);
      },
      [client, call, ticket, target](caf::error& err) {
        if (!client->settle(ticket)) return;
        if (refusal(err)) return call->failed(bucket_failure{std::move(err), true});
        client->pull_lost(call, target, err);
      });
}

void bucket_client::expect_ack(std::shared_ptr<push_call> call, caf::message_id id) {
  const auto target = buckets_[call->b].handle;
  const uint64_t ticket =
      track(target, [this, call, target](const caf::error& err) { push_lost(call, target, err); });
  auto client = shared_from_this();
  answer_to(self_, id).then(
      [client, call, ticket](const wire& w) {
        if (!client->settle(ticket)) return;
        auto ack = decode<push_ack>(w);
        if (!ack) return call->failed(bucket_failure{std::move(ack.error()), true});
        call->done(*ack);
      },
      [client, call, ticket, target](caf::error& err) {
        if (!client->settle(ticket)) return;
        if (refusal(err)) return call->failed(bucket_failure{std::move(err), true});
        client->push_lost(call, target, err);
      });
}

void bucket_client::send_pull(std::shared_ptr<pull_call> call) {
  auto& route = buckets_[call->b];
  if (is_down(call->b)) return pull_lost(call, route.handle, actor_down());
  expect_values(call, route.channel->pull(self_, route.handle, call->request));
}

void bucket_client::send_push(std::shared_ptr<push_call> call) {
  auto& route = buckets_[call->b];
  if (is_down(call->b)) return push_lost(call, route.handle, actor_down());
  size_t bytes = 0;
  const auto id = route.channel->push(self_, route.handle, *call->push, call->grad, bytes);
  if (config_.count_bytes) config_.count_bytes(double(bytes), 0);
  expect_ack(call, id);
}

void bucket_client::pull(size_t b, pull_request request, value_place place, values_handler done,
                         failure_handler failed) {
  auto call = std::make_shared<pull_call>(
      pull_call{b, std::move(request), std::move(place), std::move(done), std::move(failed)});
  admit(1, [this, call] { send_pull(call); });
}

void bucket_client::push(size_t b, std::shared_ptr<push_request> push, gradient_views grad,
                         ack_handler done, failure_handler failed) {
  auto call = std::make_shared<push_call>(
      push_call{b, std::move(push), std::move(grad), std::move(done), std::move(failed)});
  admit(1, [this, call] { send_push(call); });
}

void bucket_client::push_then_pull(size_t b, std::shared_ptr<push_request> push,
                                   gradient_views grad, pull_request request, value_place place,
                                   ack_handler acked, values_handler pulled,
                                   failure_handler push_failed, failure_handler pull_failed) {
  auto pushing = std::make_shared<push_call>(
      push_call{b, std::move(push), std::move(grad), std::move(acked), std::move(push_failed)});
  auto pulling = std::make_shared<pull_call>(pull_call{b, std::move(request), std::move(place),
                                                       std::move(pulled), std::move(pull_failed)});
  admit(2, [this, pushing, pulling] { send_pair(pushing, pulling); });
}

void bucket_client::send_pair(std::shared_ptr<push_call> pushing,
                              std::shared_ptr<pull_call> pulling) {
  const size_t b = pushing->b;
  if (is_down(b)) {
    send_push(pushing);
    return send_pull(pulling);
  }
  auto& route = buckets_[b];
  size_t bytes = 0;
  const auto [push_id, pull_id] = route.channel->push_then_pull(
      self_, route.handle, *pushing->push, pushing->grad, pulling->request, bytes);
  if (config_.count_bytes) config_.count_bytes(double(bytes), 0);
  expect_ack(pushing, push_id);
  expect_values(pulling, pull_id);
}

void bucket_client::on_down(const caf::down_msg& msg) {
  for (auto& route : buckets_)
    if (route.handle.address() == msg.source) route.down = msg.source;
  std::vector<std::function<void(const caf::error&)>> lost;
  for (auto i = in_flight_.begin(); i != in_flight_.end();) {
    if (i->second.target.address() != msg.source) {
      ++i;
      continue;
    }
    lost.push_back(std::move(i->second.lost));
    i = in_flight_.erase(i);
  }
  for (auto& resend : lost) resend(msg.reason);
  send_waiting();
}

}  // namespace troupe
