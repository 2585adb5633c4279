// ready_relay: hands a task's "tensor i is final" (gradient_ready) from backward's threads to
// the thread that runs the step; put_relay: the same for a tensor's gradient (gradient_put),
// copied when it comes from another thread. An autograd engine may run hooks on its own threads
// (libtorch does on a GPU); Troupe's gradient_ready must be called on the step's thread. A call
// from the step's thread goes through at once; others wait until the step returns and close()
// delivers them. For task authors whose backward calls back from other threads (troupe/torch.hpp
// and the Python package use it); thread-safe; one per step, shared with the hooks that outlive it.
#pragma once

#include <cstddef>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "troupe/task.hpp"

namespace troupe {

class ready_relay {
 public:
  // `ready` must outlive the step (it is the gradient_range argument).
  explicit ready_relay(const gradient_ready& ready) : ready_(&ready) {}

  void tell(size_t tensor) {
    if (std::this_thread::get_id() == owner_) {
      std::lock_guard lock(mutex_);
      if (!open_) return;
    } else {
      std::lock_guard lock(mutex_);
      if (open_) later_.push_back(tensor);
      return;
    }
    (*ready_)(tensor);
  }

  // The step returned: what waited is delivered when `deliver` (the step succeeded; otherwise
  // its gradient is not final), and nothing more is told.
  void close(bool deliver) {
    std::vector<size_t> due;
    {
      std::lock_guard lock(mutex_);
      open_ = false;
      due.swap(later_);
    }
    if (deliver)
      for (size_t t : due) (*ready_)(t);
  }

 private:
  const gradient_ready* ready_;
  std::thread::id owner_ = std::this_thread::get_id();
  std::mutex mutex_;
  std::vector<size_t> later_;
  bool open_ = true;
};

class put_relay {
 public:
  // `put` must outlive the step (it is the gradient_range_streamed argument).
  explicit put_relay(const gradient_put& put) : put_(&put) {}

  void put(size_t tensor, std::span<const float> gradient) {
    if (std::this_thread::get_id() == owner_) {
      std::lock_guard lock(mutex_);
      if (!open_) return;
    } else {
      std::lock_guard lock(mutex_);
      if (open_) later_.emplace_back(tensor, std::vector<float>(gradient.begin(), gradient.end()));
      return;
    }
    (*put_)(tensor, gradient);
  }

  // As ready_relay::close.
  void close(bool deliver) {
    std::vector<std::pair<size_t, std::vector<float>>> due;
    {
      std::lock_guard lock(mutex_);
      open_ = false;
      due.swap(later_);
    }
    if (deliver)
      for (const auto& [t, gradient] : due) (*put_)(t, gradient);
  }

 private:
  const gradient_put* put_;
  std::thread::id owner_ = std::this_thread::get_id();
  std::mutex mutex_;
  std::vector<std::pair<size_t, std::vector<float>>> later_;
  bool open_ = true;
};

}  // namespace troupe
