#include "troupe/dashboard.hpp"

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "dashboard_assets.hpp"
#include "http_connection.hpp"

namespace troupe {

namespace {

constexpr const char* security_headers =
    "Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "Referrer-Policy: no-referrer\r\n"
    "Cache-Control: no-store\r\n";

std::string response(const char* status, std::string_view type, std::string_view body) {
  return fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}",
      status, type, body.size(), security_headers, body);
}

std::string lower(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The method and the path of the request line ("GET", "/state"), without a query.
std::pair<std::string, std::string> request_line(const std::string& request) {
  const auto end = request.find_first_of("\r\n");
  const std::string line = request.substr(0, end);
  const auto a = line.find(' ');
  const auto b = line.find(' ', a == std::string::npos ? a : a + 1);
  if (a == std::string::npos || b == std::string::npos) return {};
  std::string path = line.substr(a + 1, b - a - 1);
  path = path.substr(0, path.find('?'));
  return {line.substr(0, a), path};
}

bool is_events(const std::string& request) {
  const auto [method, path] = request_line(request);
  return method == "GET" && path == "/events";
}

}  // namespace

bool dashboard_host_ok(const std::string& request, const std::string& authority) {
  const std::string text = lower(request);
  const auto at = text.find("\nhost:");
  if (at == std::string::npos) return false;
  const auto start = text.find_first_not_of(" \t", at + 6);
  const auto end = text.find_first_of("\r\n", start);
  if (start == std::string::npos) return false;
  std::string host = text.substr(start, end == std::string::npos ? end : end - start);
  while (!host.empty() && (host.back() == ' ' || host.back() == '\t')) host.pop_back();
  if (host == lower(authority)) return true;
  const auto colon = authority.rfind(':');
  const std::string bound = authority.substr(0, colon);
  return bound.rfind("127.", 0) == 0 && host == "localhost" + authority.substr(colon);
}

std::string dashboard_response(const std::string& request, const std::string& authority,
                               const std::function<std::string()>& state) {
  if (!dashboard_host_ok(request, authority))
    return response("421 Misdirected Request", "text/plain; charset=utf-8",
                    "this dashboard answers to " + authority + " only\n");
  const auto [method, path] = request_line(request);
  if (method != "GET")
    return response("405 Method Not Allowed", "text/plain; charset=utf-8",
                    "the dashboard is read-only\n");
  if (path == "/state") return response("200 OK", "application/json", state());
  const std::string wanted = path == "/" ? "/index.html" : path;
  for (const auto& a : dashboard_assets())
    if (a.path == wanted) return response("200 OK", a.type, a.body);
  return response("404 Not Found", "text/plain; charset=utf-8", "not found\n");
}

caf::expected<std::unique_ptr<dashboard_endpoint>> dashboard_endpoint::start(
    snapshot_source snapshot, const host_port& where, const std::string& tls_dir,
    size_t max_viewers, std::chrono::milliseconds every) {
  auto opened = http::open_endpoint(where, tls_dir, "the dashboard");
  if (!opened) return std::move(opened.error());
  const auto [socket, tls] = *opened;
  auto authority = fmt::format("{}:{}", where.host, socket.port);
  return std::unique_ptr<dashboard_endpoint>(new dashboard_endpoint(
      std::move(snapshot), socket.fd, std::move(authority), socket.port, tls, max_viewers, every));
}

dashboard_endpoint::dashboard_endpoint(snapshot_source snapshot, int listener,
                                       std::string authority, uint16_t port, ssl_ctx_st* tls,
                                       size_t max_viewers, std::chrono::milliseconds every)
    : snapshot_(std::move(snapshot)),
      listener_(listener),
      authority_(std::move(authority)),
      port_(port),
      tls_(tls),
      max_viewers_(max_viewers),
      every_(every) {
  thread_ = std::thread([this] { serve(); });
}

dashboard_endpoint::~dashboard_endpoint() {
  stopping_ = true;
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& t : streams_) t.join();
  ::close(listener_);
  SSL_CTX_free(tls_);
}

std::pair<std::string, uint64_t> dashboard_endpoint::latest() {
  std::unique_lock<std::mutex> l{lock_};
  const auto now = std::chrono::steady_clock::now();
  if ((version_ == 0 || now - sampled_ >= every_) && !sampling_) {
    sampling_ = true;
    l.unlock();
    std::string fresh = snapshot_();  // outside the lock: it asks the coordinator
    l.lock();
    state_ = std::move(fresh);
    ++version_;
    sampled_ = std::chrono::steady_clock::now();
    sampling_ = false;
    changed_.notify_all();
  } else if (version_ == 0) {  // another thread samples the first state
    changed_.wait_for(l, every_ * 5, [&] { return version_ > 0 || stopping_; });
  }
  return {state_, version_};
}

void dashboard_endpoint::serve() {
  while (!stopping_) {
    const int fd = http::accept_one(listener_);
    if (fd < 0) continue;
    answer(fd);
  }
}

// Answers at once, or hands an /events request to a thread of its own (one per viewer).
void dashboard_endpoint::answer(int fd) {
  using namespace std::chrono;
  auto c = std::make_unique<http::connection>(
      fd, tls_, http::steady::now() + milliseconds(http::request_wait_ms));
  const std::string request = c->open() ? c->read_request() : std::string{};
  reap();
  if (!request.empty() && is_events(request) && dashboard_host_ok(request, authority_)) {
    std::lock_guard<std::mutex> l{lock_};
    if (viewers_ < max_viewers_) {
      ++viewers_;
      streams_.emplace_back(
          [this, fd, c = std::shared_ptr<http::connection>(std::move(c))]() mutable {
            stream(*c);
            c.reset();  // the TLS goodbye, before the socket closes
            ::shutdown(fd, SHUT_WR);
            ::close(fd);
            std::lock_guard<std::mutex> l{lock_};
            --viewers_;
            ended_.push_back(std::this_thread::get_id());
          });
      return;
    }
    c->write_all(response("503 Service Unavailable", "text/plain; charset=utf-8",
                          fmt::format("at most {} viewers\n", max_viewers_)));
  } else if (!request.empty()) {
    c->write_all(dashboard_response(request, authority_, [this] { return latest().first; }));
  }
  c.reset();
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

void dashboard_endpoint::reap() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> l{lock_};
    for (const auto& id : ended_) {
      auto it = std::find_if(streams_.begin(), streams_.end(),
                             [&](const std::thread& t) { return t.get_id() == id; });
      if (it == streams_.end()) continue;
      done.push_back(std::move(*it));
      streams_.erase(it);
    }
    ended_.clear();
  }
  for (auto& t : done) t.join();  // each has said it ended: the join is immediate
}

void dashboard_endpoint::stream(http::connection& c) {
  uint64_t sent = 0;
  bool open = c.write_all(fmt::format(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{}Connection: keep-alive\r\n\r\n",
      security_headers));
  while (open && !stopping_) {
    auto [state, version] = latest();
    if (version != sent) open = c.write_all("data: " + state + "\n\n");
    sent = version;
    std::unique_lock<std::mutex> l{lock_};
    changed_.wait_for(l, every_, [&] { return stopping_.load(); });
  }
}

}  // namespace troupe
