// Test helper: one temporary folder per test process for its logs, reports and checkpoints
// (`scratch(name)` gives a path in it). When every test of the process passed, the folder is
// removed at the end of the run; when any failed, it stays and its path is printed, so that
// the logs of the failure can be read. Include it in any Boost.Test program. For tests only.
#pragma once

#include <unistd.h>

#include <boost/test/tree/global_fixture.hpp>
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

namespace troupe::testing {

// This process's folder, /tmp/troupe-test-<pid> (TMPDIR respected); made on first use.
inline std::filesystem::path scratch_dir() {
  namespace fs = std::filesystem;
  static const fs::path dir =
      fs::temp_directory_path() / ("troupe-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// A path for `name` in this test process's own temporary folder.
inline std::filesystem::path scratch(const std::string& name) {
  return scratch_dir() / name;
}

// Watches the run: any failed check, uncaught exception, abort or timeout keeps the folder.
class scratch_keeper : public boost::unit_test::global_configuration {
 public:
  void assertion_result(boost::unit_test::assertion_result result) override {
    if (result == boost::unit_test::AR_FAILED) failed_ = true;
  }
  void exception_caught(const boost::execution_exception&) override { failed_ = true; }
  void test_unit_aborted(const boost::unit_test::test_unit&) override { failed_ = true; }
  void test_unit_timed_out(const boost::unit_test::test_unit&) override { failed_ = true; }
  void test_aborted() override { failed_ = true; }

  void test_finish() override {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("troupe-test-" + std::to_string(::getpid()));
    if (!fs::exists(dir)) return;
    if (failed_) {
      std::cerr << "test files kept in " << dir.string() << "\n";
      return;
    }
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }

 private:
  bool failed_ = false;
};

// One per test program (an inline variable: however many files include this header).
inline scratch_keeper the_scratch_keeper;

}  // namespace troupe::testing
