// ready_relay: hands a task's "tensor i is final" (gradient_ready) from backward's threads to
// the thread that runs the step. An autograd engine may run hooks on its own threads (libtorch
// does on a GPU); Troupe's gradient_ready must be called on the step's thread. A call from the
// step's thread goes through at once; others wait until the step returns and close() delivers
// them. For task authors whose backward calls back from other threads (troupe/torch.hpp and the
// Python package use it); thread-safe; one per step, shared with the hooks that outlive it.
#pragma once

#include <cstddef>
#include <mutex>
#include <thread>
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

}  // namespace troupe
