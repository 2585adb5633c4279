#include "actors/transport/bucket_channel.hpp"

#include <caf/mailbox_element.hpp>

#include "actors/transport/lane_client.hpp"

namespace troupe {

namespace {

// Sends `msg` to `target` as a request of `self` bounded by `timeout`, as request() does.
caf::message_id ask(caf::local_actor* self, const bucket_actor& target, caf::message msg,
                    std::chrono::milliseconds timeout) {
  const auto id = self->new_request_id(caf::message_priority::normal);
  auto dest = caf::actor_cast<caf::strong_actor_ptr>(target);
  dest->enqueue(caf::make_mailbox_element(self->ctrl(), id, {}, std::move(msg)), self->context());
  self->request_response_timeout(caf::duration{timeout}, id);
  return id.response_id();
}

caf::message pull_message(wire w) {
  return caf::make_message(pull_atom_v, std::move(w));
}

caf::message push_message(wire w) {
  return caf::make_message(push_atom_v, std::move(w));
}

class in_process_channel final : public bucket_channel {
 public:
  explicit in_process_channel(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  const char* name() const override { return "in-process"; }

  caf::message_id pull(caf::local_actor* self, const bucket_actor& target,
                       const pull_request& request) override {
    return ask(self, target, pull_message(local_wire(request)), timeout_);
  }

  caf::message_id push(caf::local_actor* self, const bucket_actor& target, const push_request& push,
                       const gradient_views& grad, size_t& bytes) override {
    bytes = 0;
    if (!grad) return ask(self, target, push_message(local_wire(push)), timeout_);
    auto whole = push;  // the gradient gathered into the message itself
    whole.dense.clear();
    for (const auto& v : *grad)
      whole.dense.push_back(
          dense_tensor{v.name, v.shape, v.row_offset, {v.values.begin(), v.values.end()}});
    return ask(self, target, push_message(local_wire(std::move(whole))), timeout_);
  }

 private:
  std::chrono::milliseconds timeout_;
};

class caf_channel final : public bucket_channel {
 public:
  explicit caf_channel(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  const char* name() const override { return "caf"; }

  caf::message_id pull(caf::local_actor* self, const bucket_actor& target,
                       const pull_request& request) override {
    return ask(self, target, pull_message(encode(request)), timeout_);
  }

  caf::message_id push(caf::local_actor* self, const bucket_actor& target, const push_request& push,
                       const gradient_views& grad, size_t& bytes) override {
    const encode_options storage{push.storage};
    wire w = grad ? encode(push, *grad, storage) : encode(push, storage);
    bytes = w.bytes.size();
    return ask(self, target, push_message(std::move(w)), timeout_);
  }

 private:
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::pair<caf::message_id, caf::message_id> bucket_channel::push_then_pull(
    caf::local_actor* self, const bucket_actor& target, const push_request& push,
    const gradient_views& grad, const pull_request& request, size_t& bytes) {
  const auto pushed = this->push(self, target, push, grad, bytes);
  return {pushed, pull(self, target, request)};
}

std::shared_ptr<bucket_channel> caf_channel_of(std::chrono::milliseconds timeout) {
  return std::make_shared<caf_channel>(timeout);
}

std::shared_ptr<bucket_channel> in_process_channel_of(std::chrono::milliseconds timeout) {
  return std::make_shared<in_process_channel>(timeout);
}

std::shared_ptr<bucket_channel> choose_channel(caf::local_actor* self, const bucket_actor& target,
                                               const lane_map& lanes,
                                               std::chrono::milliseconds timeout) {
  if (target.node() == self->node()) return in_process_channel_of(timeout);
  if (auto link = lanes.find(target.node())) return link;
  return caf_channel_of(timeout);
}

}  // namespace troupe
