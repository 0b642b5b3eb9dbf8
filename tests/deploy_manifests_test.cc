// The deployment files: every Kubernetes manifest parses as YAML, and the
// TF_CONFIG (or spec and task) each replica would get is accepted by our
// loader with the address the manifests give it.
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cluster_spec.h"
#include "gtest/gtest.h"
#include "tests/harness/process_harness.h"
#include "yaml-cpp/yaml.h"

namespace psrt {
namespace {

std::vector<YAML::Node> Documents(const std::string& rel) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAllFromFile(testing::RunfilePath(rel));
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << rel << ": not YAML: " << e.what();
  }
  for (const YAML::Node& d : docs) {
    EXPECT_TRUE(d["apiVersion"] && d["kind"]) << rel << ": a document without apiVersion/kind";
  }
  return docs;
}

// Every replica of the TFJob in `rel` gets a TF_CONFIG we accept, with the
// replica types `types`.
void ExpectAcceptedTfConfigs(const std::string& rel, const std::set<std::string>& types) {
  std::vector<YAML::Node> docs = Documents(rel);
  ASSERT_EQ(docs.size(), 1u);
  const YAML::Node& job = docs[0];
  ASSERT_EQ(job["kind"].as<std::string>(), "TFJob");
  std::string name = job["metadata"]["name"].as<std::string>();
  std::string ns = job["metadata"]["namespace"].as<std::string>();
  // What Kubeflow's training operator sets: {name}-{type}-{i}.{ns}.svc:{port}.
  std::map<std::string, int> replicas;
  std::string cluster = "{";
  for (const auto& spec : job["spec"]["tfReplicaSpecs"]) {
    std::string type = absl::AsciiStrToLower(spec.first.as<std::string>());
    int n = spec.second["replicas"].as<int>();
    int port = spec.second["template"]["spec"]["containers"][0]["ports"][0]["containerPort"].as<int>();
    replicas[type] = n;
    std::vector<std::string> addrs;
    for (int i = 0; i < n; ++i)
      addrs.push_back(absl::StrCat("\"", name, "-", type, "-", i, ".", ns, ".svc:", port, "\""));
    cluster += absl::StrCat(cluster.size() > 1 ? ", " : "", "\"", type, "\": [", absl::StrJoin(addrs, ", "), "]");
  }
  cluster += "}";
  std::set<std::string> got;
  for (const auto& [type, n] : replicas) got.insert(type);
  ASSERT_EQ(got, types) << rel;
  for (const auto& [type, n] : replicas) {
    for (int i = 0; i < n; ++i) {
      std::string tf =
          absl::StrCat(R"({"cluster": )", cluster, R"(, "task": {"type": ")", type, R"(", "index": )", i, "}}");
      auto config = LoadTaskConfig("", "", tf.c_str());
      ASSERT_TRUE(config.ok()) << config.status() << "\n" << tf;
      EXPECT_EQ(config->address, absl::StrCat(name, "-", type, "-", i, ".", ns, ".svc:2222"));
    }
  }
}

TEST(DeployManifestsTest, TfJobReplicasGetAnAcceptedTfConfig) {
  ExpectAcceptedTfConfigs("deploy/k8s/tfjob.yaml", {"chief", "evaluator", "ps", "worker"});
}

// The PS-less cluster of multi_worker_mirrored: no ps, and every worker
// declares its collective port and is given it.
TEST(DeployManifestsTest, MirroredTfJobHasNoPsAndDeclaresTheCollectivePort) {
  ExpectAcceptedTfConfigs("deploy/k8s/tfjob_mirrored.yaml", {"chief", "worker"});
  YAML::Node worker = Documents("deploy/k8s/tfjob_mirrored.yaml")[0]["spec"]["tfReplicaSpecs"]["Worker"];
  YAML::Node container = worker["template"]["spec"]["containers"][0];
  EXPECT_NE(container["command"][2].as<std::string>().find("--collective_port=2223"), std::string::npos);
  bool declared = false;
  for (const auto& port : container["ports"]) declared = declared || port["containerPort"].as<int>() == 2223;
  EXPECT_TRUE(declared);
}

TEST(DeployManifestsTest, StatefulSetPodsFindThemselvesInTheConfigMapSpec) {
  std::vector<YAML::Node> docs = Documents("deploy/k8s/statefulset.yaml");
  std::string spec_text;
  std::map<std::string, int> sets;  // role -> replicas
  for (const YAML::Node& d : docs) {
    std::string kind = d["kind"].as<std::string>();
    if (kind == "ConfigMap" && d["data"]["cluster.json"]) spec_text = d["data"]["cluster.json"].as<std::string>();
    if (kind == "StatefulSet") {
      sets[d["spec"]["selector"]["matchLabels"]["role"].as<std::string>()] = d["spec"]["replicas"].as<int>();
    }
  }
  ASSERT_FALSE(spec_text.empty());
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/cluster.json";
  std::ofstream(path) << spec_text;
  ASSERT_EQ(sets.size(), 3u);
  for (const auto& [role, n] : sets) {
    for (int i = 0; i < n; ++i) {
      // The pod psrt-{role}-{i} runs --task={role}:{i}.
      auto config = LoadTaskConfig(path, absl::StrCat(role, ":", i), nullptr);
      ASSERT_TRUE(config.ok()) << config.status();
      EXPECT_EQ(config->address, absl::StrCat("psrt-", role, "-", i, ".psrt:2222"));
    }
  }
}

// Every pod of both manifests runs mutual TLS with its own certificate
// from the mounted Secret of its role only (a worker's pod holds no chief
// key); the Secret's file names follow make_certs.sh. The evaluator, which
// calls nobody, holds none.
TEST(DeployManifestsTest, EveryPodMountsItsCertificatesAndRunsMutualTls) {
  std::vector<YAML::Node> pods;  // pod specs
  for (const YAML::Node& d : Documents("deploy/k8s/statefulset.yaml")) {
    if (d["kind"].as<std::string>() == "StatefulSet") pods.push_back(d["spec"]["template"]["spec"]);
  }
  for (const YAML::Node& d : Documents("deploy/k8s/tfjob.yaml")) {
    for (const auto& spec : d["spec"]["tfReplicaSpecs"]) pods.push_back(spec.second["template"]["spec"]);
  }
  ASSERT_EQ(pods.size(), 7u);
  for (const YAML::Node& pod : pods) {
    const YAML::Node& c = pod["containers"][0];
    std::string command;
    for (const auto& part : c["command"]) command += part.as<std::string>() + " ";
    if (command.find("/opt/psrt/bin/evaluator") != std::string::npos) {
      // The evaluator calls no daemon: it needs, and holds, no key.
      EXPECT_EQ(command.find("--tls"), std::string::npos) << command;
      for (const auto& v : pod["volumes"]) EXPECT_FALSE(v["secret"]) << "the evaluator mounts a Secret";
      continue;
    }
    std::string role;
    for (const char* r : {"ps", "worker", "chief"}) {
      // The image's paths (deploy/Dockerfile, deploy/install.sh).
      if (command.find(absl::StrCat("/opt/psrt/bin/", r == std::string("ps") ? "ps_server" : r, " ")) !=
          std::string::npos) {
        role = r;
      }
    }
    ASSERT_FALSE(role.empty()) << command;
    EXPECT_NE(command.find("--tls_ca=/etc/psrt-tls/ca.pem"), std::string::npos) << command;
    EXPECT_NE(command.find(absl::StrCat("--tls_cert=/etc/psrt-tls/", role, "-${HOSTNAME##*-}.pem")), std::string::npos)
        << command;
    EXPECT_NE(command.find(absl::StrCat("--tls_key=/etc/psrt-tls/", role, "-${HOSTNAME##*-}.key")), std::string::npos)
        << command;
    bool mounted = false, secret = false;
    for (const auto& m : c["volumeMounts"]) mounted |= m["mountPath"].as<std::string>() == "/etc/psrt-tls";
    int secrets = 0;
    for (const auto& v : pod["volumes"]) {
      if (!v["secret"]) continue;
      ++secrets;
      secret |= v["secret"]["secretName"].as<std::string>() == "psrt-tls-" + role;
    }
    EXPECT_TRUE(mounted && secret) << role << ": /etc/psrt-tls is not the psrt-tls-" << role << " Secret";
    EXPECT_EQ(secrets, 1) << role << ": mounts another role's keys";
  }
}

TEST(DeployManifestsTest, ExampleSpecsAndSystemdUnits) {
  for (const char* spec : {"deploy/specs/local.json", "deploy/specs/three_hosts.json"}) {
    auto s = ClusterSpec::FromJsonFile(testing::RunfilePath(spec));
    EXPECT_TRUE(s.ok()) << spec << ": " << s.status();
  }
  for (const char* unit : {"deploy/systemd/psrt-ps@.service", "deploy/systemd/psrt-worker@.service",
                           "deploy/systemd/psrt-chief.service"}) {
    std::ifstream in(testing::RunfilePath(unit));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("--cluster_spec="), std::string::npos) << unit;
    EXPECT_NE(text.find("--task="), std::string::npos) << unit;
    EXPECT_NE(text.find("Restart=on-failure"), std::string::npos) << unit;
  }
}

std::string FileText(const std::string& rel) {
  std::ifstream in(testing::RunfilePath(rel));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every pod runs a binary the image has (deploy/Dockerfile installs with
// deploy/install.sh into /opt/psrt/bin) as the image's user, whose group owns
// the pod's volumes (fsGroup): the daemons can write /checkpoints.
TEST(DeployManifestsTest, EveryPodRunsTheImagesBinariesAsItsUser) {
  const std::string dockerfile = FileText("deploy/Dockerfile");
  const std::string install = FileText("deploy/install.sh");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dockerfile, m, std::regex("useradd --system --uid ([0-9]+)"))) << dockerfile;
  const int uid = std::stoi(m[1]);
  ASSERT_NE(dockerfile.find("deploy/install.sh --bin_dir=bazel-bin --destdir=/stage"), std::string::npos);
  int pods = 0;
  for (const char* manifest :
       {"deploy/k8s/statefulset.yaml", "deploy/k8s/tfjob.yaml", "deploy/k8s/tfjob_mirrored.yaml"}) {
    std::vector<YAML::Node> specs;
    for (const YAML::Node& d : Documents(manifest)) {
      if (d["kind"].as<std::string>() == "StatefulSet") specs.push_back(d["spec"]["template"]["spec"]);
      if (d["kind"].as<std::string>() == "TFJob") {
        for (const auto& r : d["spec"]["tfReplicaSpecs"]) specs.push_back(r.second["template"]["spec"]);
      }
    }
    for (const YAML::Node& pod : specs) {
      ++pods;
      std::string command;
      for (const auto& part : pod["containers"][0]["command"]) command += part.as<std::string>() + " ";
      ASSERT_TRUE(std::regex_search(command, m, std::regex("/opt/psrt/bin/([a-z_]+)"))) << manifest << ": " << command;
      EXPECT_NE(install.find(absl::StrCat(":", m[1].str(), "\"")), std::string::npos)
          << manifest << " runs /opt/psrt/bin/" << m[1] << ", which install.sh does not install";
      const YAML::Node& sc = pod["securityContext"];
      ASSERT_TRUE(sc) << manifest << ": a pod without a securityContext";
      EXPECT_EQ(sc["runAsUser"].as<int>(), uid) << manifest;
      EXPECT_EQ(sc["fsGroup"].as<int>(), uid) << manifest;
    }
  }
  EXPECT_EQ(pods, 9);
}

// Every pod of every manifest serves /metrics on the port its
// prometheus.io annotations name, on every interface, and declares it.
TEST(DeployManifestsTest, EveryPodIsScrapedOnItsMetricsPort) {
  std::vector<std::pair<std::string, YAML::Node>> templates;  // file, pod template
  for (const char* rel : {"deploy/k8s/statefulset.yaml", "deploy/k8s/tfjob.yaml", "deploy/k8s/tfjob_mirrored.yaml"}) {
    for (const YAML::Node& d : Documents(rel)) {
      if (d["kind"].as<std::string>() == "StatefulSet") templates.emplace_back(rel, d["spec"]["template"]);
      if (d["kind"].as<std::string>() == "TFJob") {
        for (const auto& spec : d["spec"]["tfReplicaSpecs"]) templates.emplace_back(rel, spec.second["template"]);
      }
    }
  }
  ASSERT_EQ(templates.size(), 9u);  // 3 StatefulSets, 4 + 2 TFJob replica types
  for (const auto& [rel, t] : templates) {
    const YAML::Node& c = t["spec"]["containers"][0];
    std::string command;
    for (const auto& part : c["command"]) command += part.as<std::string>() + " ";
    const YAML::Node a = t["metadata"]["annotations"];
    ASSERT_TRUE(a && a["prometheus.io/scrape"] && a["prometheus.io/port"]) << rel << ": " << command;
    EXPECT_EQ(a["prometheus.io/scrape"].as<std::string>(), "true") << rel;
    EXPECT_EQ(a["prometheus.io/path"].as<std::string>(), "/metrics") << rel;
    const int port = std::stoi(a["prometheus.io/port"].as<std::string>());
    EXPECT_NE(command.find(absl::StrCat("--http_port=", port)), std::string::npos) << rel << ": " << command;
    EXPECT_NE(command.find("--http_listen=0.0.0.0"), std::string::npos) << rel << ": " << command;
    bool declared = false;
    for (const auto& p : c["ports"]) declared = declared || p["containerPort"].as<int>() == port;
    EXPECT_TRUE(declared) << rel << ": port " << port << " is not declared: " << command;
  }
  // The scrape job of deploy/prometheus reads those annotations.
  std::vector<YAML::Node> config = YAML::LoadAllFromFile(testing::RunfilePath("deploy/prometheus/kubernetes-pods.yml"));
  ASSERT_EQ(config.size(), 1u);
  std::string sources;
  for (const auto& r : config[0]["scrape_configs"][0]["relabel_configs"]) {
    for (const auto& l : r["source_labels"]) sources += l.as<std::string>() + " ";
  }
  for (const char* a : {"scrape", "port", "path"}) {
    EXPECT_NE(sources.find(absl::StrCat("__meta_kubernetes_pod_annotation_prometheus_io_", a, " ")), std::string::npos)
        << sources;
  }
}

// The systemd units serve /metrics (the chief on 9090, ps:N on 930N,
// worker:N on 940N), and deploy/prometheus/hosts.yml scrapes exactly those
// for the three-host spec; promtool accepts it where it is installed.
TEST(DeployManifestsTest, SystemdUnitsServeWhatHostsYmlScrapes) {
  EXPECT_NE(FileText("deploy/systemd/psrt-chief.service").find("--http_port=9090 --http_listen=0.0.0.0"),
            std::string::npos);
  EXPECT_NE(FileText("deploy/systemd/psrt-ps@.service").find("--http_port=930%i --http_listen=0.0.0.0"),
            std::string::npos);
  EXPECT_NE(FileText("deploy/systemd/psrt-worker@.service").find("--http_port=940%i --http_listen=0.0.0.0"),
            std::string::npos);
  auto spec = ClusterSpec::FromJsonFile(testing::RunfilePath("deploy/specs/three_hosts.json"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::set<std::string> want;
  for (const auto& [job, base] :
       std::map<std::string, std::string>{{"chief", "909"}, {"ps", "930"}, {"worker", "940"}}) {
    for (int i = 0; i < spec->NumTasks(job); ++i) {
      std::string address = *spec->AddressOf(MakeTaskId(job, i));
      want.insert(absl::StrCat(address.substr(0, address.rfind(':')), ":", base, i));
    }
  }
  std::set<std::string> got;
  YAML::Node config = YAML::LoadFile(testing::RunfilePath("deploy/prometheus/hosts.yml"));
  for (const auto& group : config["scrape_configs"][0]["static_configs"]) {
    for (const auto& t : group["targets"]) got.insert(t.as<std::string>());
  }
  EXPECT_EQ(got, want);
  if (!std::ifstream("/usr/bin/promtool").good()) GTEST_SKIP() << "no /usr/bin/promtool (deploy/setup.sh installs it)";
  EXPECT_EQ(
      std::system(
          absl::StrCat("/usr/bin/promtool check config ", testing::RunfilePath("deploy/prometheus/hosts.yml")).c_str()),
      0);
}

}  // namespace
}  // namespace psrt
