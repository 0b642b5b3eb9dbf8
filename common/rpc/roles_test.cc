// The role table and the identities certificates and token files give.
#include "common/rpc/roles.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/security.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(RolesTest, CertificateNamesGiveTheTaskTheyName) {
  Caller c = CallerFromCertificateName("worker-3");
  EXPECT_TRUE(c.Has(Role::kWorker));
  EXPECT_FALSE(c.Has(Role::kChief));
  EXPECT_EQ(c.index, 3);
  EXPECT_TRUE(c.MayActFor("worker", 3));
  EXPECT_FALSE(c.MayActFor("worker", 2));
  EXPECT_FALSE(c.MayActFor("ps", 3));
  EXPECT_EQ(CallerFromCertificateName("chief").roles, static_cast<uint8_t>(Role::kChief));
  EXPECT_EQ(CallerFromCertificateName("chief-0").index, 0);
  EXPECT_EQ(CallerFromCertificateName("ps-12").index, 12);
  for (const char* other : {"client", "ps", "ps-", "ps-x", "worker-01", "worker--1", "psycho-1", "worker-1 ", ""}) {
    Caller o = CallerFromCertificateName(other);
    EXPECT_EQ(o.roles, static_cast<uint8_t>(Role::kObserver)) << other;
    EXPECT_FALSE(o.MayActFor("worker", 1)) << other;
  }
}

TEST(RolesTest, TheTableGivesControlToTheChiefAndPushesToWorkers) {
  auto allowed = [](Rpc rpc, Role r) { return (AllowedRoles(rpc) & static_cast<uint8_t>(r)) != 0; };
  for (Rpc rpc : {Rpc::kPsCreateVariables, Rpc::kPsSnapshot, Rpc::kPsRestore, Rpc::kWorkerStart,
                  Rpc::kWorkerPause, Rpc::kWorkerResume, Rpc::kWorkerShutdown}) {
    EXPECT_TRUE(allowed(rpc, Role::kChief)) << RpcName(rpc);
    for (Role r : {Role::kPs, Role::kWorker, Role::kObserver}) EXPECT_FALSE(allowed(rpc, r)) << RpcName(rpc);
  }
  for (Rpc rpc : {Rpc::kPsPush, Rpc::kPsPushRows}) {
    EXPECT_EQ(AllowedRoles(rpc), static_cast<uint8_t>(Role::kWorker)) << RpcName(rpc);
  }
  for (Rpc rpc : {Rpc::kPsPull, Rpc::kPsPullRows}) {
    EXPECT_TRUE(allowed(rpc, Role::kChief) && allowed(rpc, Role::kWorker)) << RpcName(rpc);
  }
  // A PS calls the chief's Register/Heartbeat/ReportFailure and, as a
  // primary, its backup's replica pushes (over the backup's TCP data plane,
  // hence a ticket from OpenDataPlane, whose frames are then checked as
  // replica pushes); nothing else (and nobody else the replica pushes).
  for (int i = 0; i < kRpcCount; ++i) {
    Rpc rpc = static_cast<Rpc>(i);
    bool chief_link = rpc == Rpc::kChiefRegister || rpc == Rpc::kChiefHeartbeat || rpc == Rpc::kChiefReportFailure;
    EXPECT_EQ(allowed(rpc, Role::kPs), chief_link || rpc == Rpc::kPsReplicate || rpc == Rpc::kPsOpenDataPlane)
        << RpcName(rpc);
  }
  EXPECT_EQ(AllowedRoles(Rpc::kPsReplicate), static_cast<uint8_t>(Role::kPs));
  // A data-plane ticket carries its holder's roles: observers get none.
  EXPECT_FALSE(allowed(Rpc::kPsOpenDataPlane, Role::kObserver));
}

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path) << text;
  return path;
}

TEST(RolesTest, TokenFilesWithRoleDigestsAreParsedAndCheckedLineByLine) {
  const std::string worker_token = "0123456789abcdef0123456789abcdef";
  const std::string digest = absl::BytesToHexString(Sha256(worker_token));
  EXPECT_EQ(absl::BytesToHexString(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  SecurityPaths p;
  p.token_file = WriteFile("roles", worker_token + "\n# roles\nworker sha256:" + digest + "\n\nchief sha256:" +
                                        std::string(64, 'a') + "\n");
  absl::StatusOr<TransportSecurity> s = LoadTransportSecurity(p);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->role_tokens());
  ASSERT_EQ(s->role_digests.size(), 2u);
  EXPECT_EQ(s->role_digests[0].role, Role::kWorker);
  EXPECT_EQ(s->role_digests[0].index, -1);
  EXPECT_EQ(s->role_digests[0].digest, Sha256(worker_token));
  EXPECT_EQ(s->Describe(), "per-role tokens over plain text");

  for (const auto& [bad, message] : std::vector<std::pair<std::string, std::string>>{
           {"admin sha256:" + digest, "line 2: unknown role 'admin'"},
           {"worker " + digest, "line 2: expected `ROLE sha256:HEX`"},
           {"worker sha256:abc", "line 2: the digest must be 64 hex"},
           {"worker sha256:" + std::string(64, 'g'), "line 2: the digest must be 64 hex"},
           {"worker-01 sha256:" + digest, "line 2: bad task 'worker-01'"},
           {"worker-x sha256:" + digest, "line 2: bad task 'worker-x'"},
           {"worker--1 sha256:" + digest, "line 2: bad task 'worker--1'"},
           {"observer-1 sha256:" + digest, "line 2: bad task 'observer-1'"},
           {"evaluator-0 sha256:" + digest, "line 2: unknown role 'evaluator-0'"},
           {"worker-1 sha256:" + digest + "\nps-0 sha256:" + digest, "line 3: the same digest as line 2"},
           {"worker sha256:" + digest + "\nworker-0 sha256:" + digest, "line 3: the same digest as line 2"}}) {
    p.token_file = WriteFile("bad", worker_token + "\n" + bad + "\n");
    absl::Status st = LoadTransportSecurity(p).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(st.message()).find(message), std::string::npos) << st;
  }
}

// A task's line gives its role and index; a role's line the whole role. The
// holder of worker-1's token may act for worker 1 only.
TEST(RolesTest, PerTaskTokensGiveTheirTaskAndRoleTokensTheWholeRole) {
  const std::string w0 = "worker-zero-token-0123456789", w1 = "worker-one-token-0123456789",
                    chief = "the-chief-token-0123456789", worker = "any-worker-token-0123456789",
                    observer = "observer-token-0123456789";
  auto line = [](const std::string& name, const std::string& token) {
    return absl::StrCat(name, " sha256:", absl::BytesToHexString(Sha256(token)), "\n");
  };
  SecurityPaths p;
  p.token_file = WriteFile("tasks", absl::StrCat(w1, "\n", line("worker-0", w0), line("worker-1", w1),
                                                 line("chief-0", chief), line("ps-12", "ps-twelve-token-0123456"),
                                                 line("worker", worker), line("observer", observer)));
  absl::StatusOr<TransportSecurity> s = LoadTransportSecurity(p);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->role_digests.size(), 6u);
  EXPECT_EQ(s->role_digests[3].role, Role::kPs);
  EXPECT_EQ(s->role_digests[3].index, 12);

  std::optional<Caller> c = CallerForToken(s->role_digests, w1);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->roles, static_cast<uint8_t>(Role::kWorker));
  EXPECT_EQ(c->index, 1);
  EXPECT_EQ(c->name, "the worker-1 token");
  EXPECT_TRUE(c->MayActFor("worker", 1));
  EXPECT_FALSE(c->MayActFor("worker", 0));
  EXPECT_FALSE(c->MayActFor("ps", 1));

  c = CallerForToken(s->role_digests, chief);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->roles, static_cast<uint8_t>(Role::kChief));
  EXPECT_EQ(c->index, 0);

  c = CallerForToken(s->role_digests, worker);  // a role token: any worker, as before
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->index, -1);
  EXPECT_EQ(c->name, "the worker token");
  EXPECT_TRUE(c->MayActFor("worker", 0) && c->MayActFor("worker", 7));

  c = CallerForToken(s->role_digests, observer);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->roles, static_cast<uint8_t>(Role::kObserver));
  EXPECT_FALSE(c->MayActFor("worker", 0));

  EXPECT_FALSE(CallerForToken(s->role_digests, "not-a-token-0123456789").has_value());
  EXPECT_FALSE(CallerForToken(s->role_digests, "").has_value());
}

}  // namespace
}  // namespace psrt
