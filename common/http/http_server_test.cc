// The HTTP server against raw sockets: what it answers, the limits it puts
// on heads and bodies, and that slow clients delay nobody.
#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends what it can; returns the bytes the kernel took before an error.
size_t SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return sent;
}

// Reads until the server closes (or 10 s pass).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string Ask(int port, const std::string& request) {
  int fd = Connect(port);
  SendAll(fd, request);
  std::string r = ReadAll(fd);
  close(fd);
  return r;
}

struct ServerUnderTest {
  explicit ServerUnderTest(HttpServerOptions o = HttpServerOptions()) {
    auto s = HttpServer::Start("127.0.0.1", 0, [this](const HttpRequest& r) {
      ++handled;
      HttpResponse resp;
      resp.body = absl::StrCat("path=", r.path, " query=", r.query);
      return resp;
    }, o);
    EXPECT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
  }
  std::atomic<int> handled{0};
  std::unique_ptr<HttpServer> server;
};

TEST(HttpServerTest, AnswersGetAndHeadAndRefusesTheRest) {
  ServerUnderTest t;
  int port = t.server->port();
  std::string r = Ask(port, "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_TRUE(absl::EndsWith(r, "\r\n\r\npath=/metrics query=x=1")) << r;
  r = Ask(port, "HEAD / HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_TRUE(absl::EndsWith(r, "\r\n\r\n")) << "no body for HEAD: " << r;
  EXPECT_TRUE(absl::StartsWith(Ask(port, "DELETE / HTTP/1.1\r\n\r\n"), "HTTP/1.1 405 ")) << r;
  EXPECT_TRUE(absl::StartsWith(Ask(port, "GET nothing\r\n\r\n"), "HTTP/1.1 400 "));
  EXPECT_TRUE(absl::StartsWith(Ask(port, "GET / HTTP/1.1\r\nno colon\r\n\r\n"), "HTTP/1.1 400 "));
  EXPECT_TRUE(absl::StartsWith(Ask(port, "GET / HTTP/2\r\n\r\n"), "HTTP/1.1 505 "));
  EXPECT_EQ(t.handled.load(), 2);
  EXPECT_EQ(HtmlEscape("<a href='x'>&\"</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
}

TEST(HttpServerTest, A200MiBBodyIsRefusedWithoutBeingRead) {
  ServerUnderTest t;
  int fd = Connect(t.server->port());
  SendAll(fd, "POST / HTTP/1.1\r\nContent-Length: 209715200\r\n\r\n");
  char buf[512];
  ssize_t n = recv(fd, buf, sizeof(buf), 0);
  ASSERT_GT(n, 0);
  EXPECT_TRUE(absl::StartsWith(std::string(buf, n), "HTTP/1.1 413 ")) << std::string(buf, n);
  // The server reads at most a little of the rest, then closes: the
  // client's sends fail long before 200 MiB.
  std::string chunk(1 << 20, 'x');
  size_t sent = 0;
  for (int i = 0; i < 200; ++i) {
    size_t s = SendAll(fd, chunk);
    sent += s;
    if (s < chunk.size()) break;
  }
  close(fd);
  EXPECT_LT(sent, 64u << 20) << "the server kept reading the body";
  // A GET with a body is refused the same way.
  EXPECT_TRUE(absl::StartsWith(Ask(t.server->port(), "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
                               "HTTP/1.1 413 "));
  EXPECT_EQ(t.handled.load(), 0);
}

TEST(HttpServerTest, AHundredThousandHeadersOrAHugeHeadAreRefused) {
  ServerUnderTest t;
  std::string request = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 100000; ++i) absl::StrAppend(&request, "X-", i, ": v\r\n");
  request += "\r\n";
  std::string r = Ask(t.server->port(), request);
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 431 ")) << r.substr(0, 200);
  EXPECT_NE(r.find("more than 64 headers"), std::string::npos) << r;
  r = Ask(t.server->port(), "GET / HTTP/1.1\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 431 ")) << r.substr(0, 200);
  EXPECT_NE(r.find("over 16384 bytes"), std::string::npos) << r;
  EXPECT_EQ(t.handled.load(), 0);
}

TEST(HttpServerTest, SlowClientsDelayNobodyAndAreDroppedAtTheirDeadline) {
  HttpServerOptions o;
  o.request_timeout = absl::Milliseconds(1500);
  ServerUnderTest t(o);
  int port = t.server->port();
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(Connect(port));
    SendAll(slow.back(), "GET / HT");  // and never the rest
  }
  absl::Time start = absl::Now();
  std::string r = Ask(port, "GET /ninth HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 200 OK")) << r;
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500)) << "the ninth waited for the slow eight";
  // More slow connections than the server keeps: the oldest give way.
  for (int i = 0; i < 200; ++i) {
    slow.push_back(Connect(port));
    SendAll(slow.back(), "G");
  }
  start = absl::Now();
  r = Ask(port, "GET /last HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 200 OK")) << r;
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  // A slow one is closed at its deadline (recv sees the end, not a 10 s timeout).
  start = absl::Now();
  char c;
  EXPECT_LE(recv(slow.back(), &c, 1, 0), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int fd : slow) close(fd);
  EXPECT_EQ(t.handled.load(), 2);
}

TEST(HttpServerTest, RefusesAHostThatIsNotAnAddress) {
  auto s = HttpServer::Start("example.com", 0, [](const HttpRequest&) { return HttpResponse(); }, {});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HttpServerTest, APortAnotherServerHoldsIsRefusedSayingSo) {
  auto handler = [](const HttpRequest&) { return HttpResponse(); };
  auto first = HttpServer::Start("127.0.0.1", 0, handler, {});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = HttpServer::Start("127.0.0.1", (*first)->port(), handler, {});
  ASSERT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(), absl::StrCat("cannot listen for HTTP on 127.0.0.1:", (*first)->port(),
                                                    ": the port is in use by another process"));
}

}  // namespace
}  // namespace psrt
